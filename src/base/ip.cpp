#include "base/ip.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace meshnode::base {
namespace {

constexpr std::array<std::uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

Result<std::uint32_t> parse_number(std::string_view text, std::uint32_t max, std::string_view what) {
  std::uint32_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value > max) {
    return fail(Errc::kInvalidArgument, "invalid " + std::string(what) + " '" + std::string(text) + "'");
  }
  return value;
}

}  // namespace

IpAddr IpAddr::v4(const std::array<std::uint8_t, 4>& b) {
  IpAddr ip;
  ip.family_ = Family::kV4;
  std::memcpy(ip.bytes_.data(), b.data(), 4);
  return ip;
}

IpAddr IpAddr::v6(const std::array<std::uint8_t, 16>& b) {
  if (std::memcmp(b.data(), kV4MappedPrefix.data(), kV4MappedPrefix.size()) == 0) {
    return v4({b[12], b[13], b[14], b[15]});
  }
  IpAddr ip;
  ip.family_ = Family::kV6;
  ip.bytes_ = b;
  return ip;
}

std::optional<IpAddr> IpAddr::from_bytes(std::string_view raw) {
  if (raw.size() == 4) {
    std::array<std::uint8_t, 4> b{};
    std::memcpy(b.data(), raw.data(), 4);
    return v4(b);
  }
  if (raw.size() == 16) {
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), raw.data(), 16);
    return v6(b);
  }
  return std::nullopt;
}

Result<IpAddr> IpAddr::parse(std::string_view text) {
  // inet_pton reads a C string: an embedded NUL would silently cut the text short.
  if (text.size() > INET6_ADDRSTRLEN || text.find('\0') != std::string_view::npos) {
    return fail(Errc::kInvalidArgument, "invalid IP address");
  }
  std::string s(text);
  std::array<std::uint8_t, 16> b{};
  if (::inet_pton(AF_INET, s.c_str(), b.data()) == 1) return v4({b[0], b[1], b[2], b[3]});
  if (::inet_pton(AF_INET6, s.c_str(), b.data()) == 1) return v6(b);
  return fail(Errc::kInvalidArgument, "invalid IP address '" + s + "'");
}

bool IpAddr::is_loopback() const noexcept {
  if (is_v4()) return bytes_[0] == 127;
  static constexpr std::array<std::uint8_t, 16> kLoop = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return bytes_ == kLoop;
}

bool IpAddr::is_unspecified() const noexcept {
  auto b = bytes();
  for (char c : b) {
    if (c != 0) return false;
  }
  return true;
}

std::string_view IpAddr::bytes() const noexcept {
  return {reinterpret_cast<const char*>(bytes_.data()), is_v4() ? 4u : 16u};
}

namespace {

// "a.b.c.d" into `out` (at least 15 bytes); returns the end. By hand: glibc's inet_ntop formats
// IPv4 with sprintf, and connection records format several addresses per connection.
char* format_v4(const std::uint8_t* b, char* out) noexcept {
  for (int i = 0; i < 4; ++i) {
    if (i > 0) *out++ = '.';
    out = std::to_chars(out, out + 3, b[i]).ptr;
  }
  return out;
}

}  // namespace

std::string IpAddr::to_string() const {
  if (is_v4()) {
    char buf[16];
    return std::string(buf, format_v4(bytes_.data(), buf));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, bytes_.data(), buf, sizeof(buf));
  return buf;
}

Result<SocketAddr> SocketAddr::parse(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return fail(Errc::kInvalidArgument, "invalid socket address '" + std::string(text) + "'");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      return fail(Errc::kInvalidArgument, "invalid socket address '" + std::string(text) + "'");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto ip = IpAddr::parse(host);
  if (!ip) return std::unexpected(ip.error());
  if (!text.empty() && text.front() == '[' && host.find(':') == std::string_view::npos) {
    return fail(Errc::kInvalidArgument, "IPv4 socket address in brackets: '" + std::string(text) + "'");
  }
  if (!text.empty() && text.front() != '[' && !ip->is_v4()) {
    return fail(Errc::kInvalidArgument, "IPv6 socket address needs brackets: '" + std::string(text) + "'");
  }
  auto p = parse_number(port, 65535, "port");
  if (!p) return std::unexpected(p.error());
  if (*p == 0) return fail(Errc::kInvalidArgument, "port 0 in '" + std::string(text) + "'");
  return SocketAddr{*ip, static_cast<std::uint16_t>(*p)};
}

std::string SocketAddr::to_string() const {
  if (ip.is_v4()) {
    char buf[22];  // 255.255.255.255:65535
    char* end = format_v4(reinterpret_cast<const std::uint8_t*>(ip.bytes().data()), buf);
    *end++ = ':';
    end = std::to_chars(end, buf + sizeof(buf), port).ptr;
    return std::string(buf, end);
  }
  return "[" + ip.to_string() + "]:" + std::to_string(port);
}

Result<IpNet> IpNet::parse(std::string_view text) {
  auto slash = text.find('/');
  auto ip = IpAddr::parse(text.substr(0, slash));
  if (!ip) return std::unexpected(ip.error());
  std::uint32_t max = ip->is_v4() ? 32 : 128;
  std::uint32_t len = max;
  if (slash != std::string_view::npos) {
    auto parsed = parse_number(text.substr(slash + 1), max, "prefix length");
    if (!parsed) return std::unexpected(parsed.error());
    len = *parsed;
  }
  return IpNet{*ip, static_cast<std::uint8_t>(len)};
}

bool IpNet::contains(const IpAddr& ip) const noexcept {
  if (ip.family() != addr.family()) return false;
  auto a = addr.bytes();
  auto b = ip.bytes();
  std::size_t full = prefix_len / 8;
  if (std::memcmp(a.data(), b.data(), full) != 0) return false;
  unsigned rest = prefix_len % 8;
  if (rest == 0) return true;
  auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (static_cast<std::uint8_t>(a[full]) & mask) == (static_cast<std::uint8_t>(b[full]) & mask);
}

std::string IpNet::to_string() const { return addr.to_string() + "/" + std::to_string(prefix_len); }

}  // namespace meshnode::base
