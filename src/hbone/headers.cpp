#include "hbone/headers.hpp"

#include <array>
#include <cstdio>

namespace meshnode::hbone {

h2::Headers connect_headers(const ConnectInfo& info) {
  h2::Headers h;
  h.reserve(5);
  h.push_back({":method", "CONNECT"});
  h.push_back({":authority", info.authority.to_string()});
  std::string forwarded = "for=\"" + info.client.to_string() + "\"";
  if (!info.service_host.empty()) forwarded += ";host=" + info.service_host;
  h.push_back({"forwarded", std::move(forwarded)});
  if (!info.baggage.empty()) h.push_back({"baggage", info.baggage});
  if (!info.traceparent.empty()) h.push_back({"traceparent", info.traceparent});
  return h;
}

std::string make_traceparent(std::uint64_t trace_hi, std::uint64_t trace_lo, std::uint64_t parent) {
  std::array<char, 56> buf{};
  std::snprintf(buf.data(), buf.size(), "00-%016llx%016llx-%016llx-00", static_cast<unsigned long long>(trace_hi),
                static_cast<unsigned long long>(trace_lo), static_cast<unsigned long long>(parent));
  return std::string(buf.data(), 55);
}

base::Result<base::HboneTarget> parse_authority(std::string_view authority) {
  auto invalid = [&] {
    return base::fail(base::Errc::kInvalidArgument, "invalid CONNECT authority '" + std::string(authority) + "'");
  };
  // Only IP-literal characters: base::IpAddr::parse hands the text to inet_pton as a C string, so
  // an embedded NUL would silently truncate "10.0.0.1\0:80" to 10.0.0.1.
  if (authority.find_first_not_of("0123456789abcdefABCDEF.:[]") != std::string_view::npos) return invalid();
  auto addr = base::SocketAddr::parse(authority);
  if (!addr) return invalid();
  return base::HboneTarget{*addr};
}

}  // namespace meshnode::hbone
