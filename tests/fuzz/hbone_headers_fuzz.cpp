// libFuzzer target for the HBONE CONNECT header code (Istio HBONE, research §2.1; hbone/headers):
// the `:authority` a peer sends is parsed on every inbound stream; the request headers we send are
// built from state values. Checks: an accepted authority is an IP literal with a port 1..65535 whose
// canonical text parses to the same target; connect_headers round-trips the authority, puts the
// client in `forwarded: for="ip:port"`, never adds :scheme or :path (RFC 9113 §8.5), and
// make_traceparent is a W3C version-00 traceparent carrying exactly the ids it was given.
//
// Input: the authority text up to the first NUL; after it 24 bytes of trace/parent ids; the rest
// is split at NULs into client address, service host and baggage.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "hbone/headers.hpp"

namespace {

namespace hbone = meshnode::hbone;
namespace base = meshnode::base;

std::uint64_t word(std::string_view bytes, std::size_t at) {
  std::uint64_t w = 0;
  if (bytes.size() >= at + 8) std::memcpy(&w, bytes.data() + at, 8);
  return w;
}

bool is_lower_hex(std::string_view s) { return s.find_first_not_of("0123456789abcdef") == std::string_view::npos; }

void check_authority(std::string_view text) {
  auto target = hbone::parse_authority(text);
  if (!target) return;
  FUZZ_CHECK(text.find_first_not_of("0123456789abcdefABCDEF.:[]") == std::string_view::npos, "non-IP bytes");
  FUZZ_CHECK(target->port() != 0, "port 0 accepted");
  auto again = hbone::parse_authority(target->to_string());
  FUZZ_CHECK(again && *again == *target, "canonical authority does not parse back");
}

void check_traceparent(std::uint64_t hi, std::uint64_t lo, std::uint64_t parent) {
  const std::string tp = hbone::make_traceparent(hi, lo, parent);
  FUZZ_CHECK(tp.size() == 55 && tp.starts_with("00-") && tp[35] == '-' && tp.ends_with("-00"), "traceparent shape");
  const std::string_view trace = std::string_view(tp).substr(3, 32), span = std::string_view(tp).substr(36, 16);
  FUZZ_CHECK(is_lower_hex(trace) && is_lower_hex(span), "traceparent ids not lowercase hex");
  FUZZ_CHECK(std::stoull(std::string(trace.substr(0, 16)), nullptr, 16) == hi &&
                 std::stoull(std::string(trace.substr(16)), nullptr, 16) == lo &&
                 std::stoull(std::string(span), nullptr, 16) == parent,
             "traceparent ids differ from the input");
}

void check_connect_headers(const hbone::ConnectInfo& info) {
  const auto headers = hbone::connect_headers(info);
  FUZZ_CHECK(headers.size() >= 3 && headers[0].name == ":method" && headers[0].value == "CONNECT", ":method");
  FUZZ_CHECK(headers[1].name == ":authority", ":authority second");
  auto authority = hbone::parse_authority(headers[1].value);
  FUZZ_CHECK(authority && *authority == info.authority, ":authority does not parse back");
  FUZZ_CHECK(headers[2].name == "forwarded" && headers[2].value.starts_with("for=\"" + info.client.to_string() + "\""),
             "forwarded for=");
  std::size_t expected = 3 + !info.baggage.empty() + !info.traceparent.empty();
  FUZZ_CHECK(headers.size() == expected, "header count");
  for (const auto& h : headers) {
    FUZZ_CHECK(h.name != ":scheme" && h.name != ":path", "CONNECT with :scheme or :path");
    for (char c : h.name) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "uppercase header name");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto nul = in.find('\0');
  const std::string_view authority = in.substr(0, nul);
  check_authority(authority);
  if (nul == std::string_view::npos) return 0;

  const std::string_view rest = in.substr(nul + 1);
  check_traceparent(word(rest, 0), word(rest, 8), word(rest, 16));
  std::vector<std::string_view> fields;
  for (std::string_view tail = rest.size() > 24 ? rest.substr(24) : std::string_view();;) {
    const auto at = tail.find('\0');
    fields.push_back(tail.substr(0, at));
    if (at == std::string_view::npos) break;
    tail.remove_prefix(at + 1);
  }
  fields.resize(3);
  auto target = hbone::parse_authority(authority);
  auto client = base::SocketAddr::parse(fields[0]);
  if (!target || !client) return 0;
  hbone::ConnectInfo info{*target, base::ClientAddr{*client}, std::string(fields[1]), std::string(fields[2]),
                          hbone::make_traceparent(word(rest, 0), word(rest, 8), word(rest, 16))};
  check_connect_headers(info);
  return 0;
}
