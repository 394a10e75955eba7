#include "hbone/headers.hpp"

#include <array>

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

namespace {

// 16 lowercase hex digits of `v`, zero-padded, at `out` (no printf: one per connection).
char* put_hex16(std::uint64_t v, char* out) noexcept {
  constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = kDigits[v & 0xf];
  return out + 16;
}

}  // namespace

std::string make_traceparent(std::uint64_t trace_hi, std::uint64_t trace_lo, std::uint64_t parent) {
  std::array<char, 55> buf;  // "00-" trace id (32) "-" parent id (16) "-00"
  char* p = buf.data();
  *p++ = '0';
  *p++ = '0';
  *p++ = '-';
  p = put_hex16(trace_lo, put_hex16(trace_hi, p));
  *p++ = '-';
  p = put_hex16(parent, p);
  *p++ = '-';
  *p++ = '0';
  *p++ = '0';
  return std::string(buf.data(), buf.size());
}

std::optional<std::string_view> traceparent_trace_id(std::string_view tp) {
  auto hex = [](std::string_view s) { return s.find_first_not_of("0123456789abcdef") == std::string_view::npos; };
  auto zeros = [](std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; };
  constexpr std::size_t kLength = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
  if (tp.size() < kLength || tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return std::nullopt;
  const auto version = tp.substr(0, 2);
  const auto trace_id = tp.substr(3, 32);
  const auto parent_id = tp.substr(36, 16);
  const auto flags = tp.substr(53, 2);
  if (!hex(version) || !hex(trace_id) || !hex(parent_id) || !hex(flags)) return std::nullopt;
  if (version == "ff" || zeros(trace_id) || zeros(parent_id)) return std::nullopt;
  if (tp.size() > kLength && (version == "00" || tp[kLength] != '-')) return std::nullopt;
  // Whatever a later version appends is never logged; still refuse control bytes and spaces.
  for (char c : tp.substr(kLength)) {
    if (c <= ' ' || c > '~') return std::nullopt;
  }
  return trace_id;
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
