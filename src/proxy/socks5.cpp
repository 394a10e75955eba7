#include "proxy/socks5.hpp"

#include <cstring>

namespace meshnode::proxy::socks5 {
namespace {

std::uint8_t at(std::span<const std::byte> in, std::size_t i) { return std::to_integer<std::uint8_t>(in[i]); }

}  // namespace

base::Result<Parsed<bool>> parse_greeting(std::span<const std::byte> in) {
  Parsed<bool> out;
  if (in.size() < 2) {
    out.need = 2;
    if (!in.empty() && at(in, 0) != kVersion) return base::fail(base::Errc::kProtocol, "socks version is not 5");
    return out;
  }
  if (at(in, 0) != kVersion) return base::fail(base::Errc::kProtocol, "socks version is not 5");
  std::size_t total = 2 + at(in, 1);
  if (in.size() < total) {
    out.need = total;
    return out;
  }
  bool no_auth = false;
  for (std::size_t i = 2; i < total; ++i) no_auth = no_auth || at(in, i) == kNoAuth;
  out.value = no_auth;
  out.consumed = total;
  return out;
}

base::Result<Parsed<Request>> parse_request(std::span<const std::byte> in) {
  Parsed<Request> out;
  if (in.size() < 5) {
    out.need = 5;
    return out;
  }
  if (at(in, 0) != kVersion) return base::fail(base::Errc::kProtocol, "socks version is not 5");
  if (at(in, 2) != 0) return base::fail(base::Errc::kProtocol, "socks reserved byte is not 0");
  Request req;
  req.command = at(in, 1);
  req.address_type = at(in, 3);
  std::size_t addr_len = 0;
  std::size_t addr_at = 4;
  switch (req.address_type) {
    case 1: addr_len = 4; break;
    case 4: addr_len = 16; break;
    case 3: addr_len = 1 + at(in, 4); break;
    default:
      out.value = req;  // the caller answers "address type not supported"
      out.consumed = in.size();
      return out;
  }
  std::size_t total = addr_at + addr_len + 2;
  if (in.size() < total) {
    out.need = total;
    return out;
  }
  req.port = static_cast<std::uint16_t>(at(in, total - 2) << 8 | at(in, total - 1));
  if (req.address_type == 3) {
    req.domain.assign(reinterpret_cast<const char*>(in.data() + 5), addr_len - 1);
  } else {
    std::string raw(reinterpret_cast<const char*>(in.data() + addr_at), addr_len);
    auto ip = base::IpAddr::from_bytes(raw);
    if (ip) req.address = base::SocketAddr{*ip, req.port};
  }
  out.value = std::move(req);
  out.consumed = total;
  return out;
}

std::array<std::byte, 10> make_reply(Reply reply) {
  std::array<std::byte, 10> out{};
  out[0] = std::byte{kVersion};
  out[1] = static_cast<std::byte>(reply);
  out[3] = std::byte{1};
  return out;
}

}  // namespace meshnode::proxy::socks5
