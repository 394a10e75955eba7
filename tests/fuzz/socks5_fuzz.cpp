// libFuzzer target for the socks5 negotiation parsers of the 15080 listener (RFC 1928; proxy/socks5):
// the input is what a local client sends, greeting then request. The listener re-parses its buffer
// as bytes arrive, so besides "no crash" every prefix must agree with the whole: an incomplete
// prefix asks for more than it has, an error never turns into success with more bytes, and a
// complete message keeps its value and length however much follows. An accepted CONNECT target,
// re-encoded as a client would, parses to the same target.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "proxy/socks5.hpp"

namespace {

namespace socks5 = meshnode::proxy::socks5;
using Bytes = std::span<const std::byte>;

bool same(const socks5::Request& a, const socks5::Request& b) {
  return a.command == b.command && a.address == b.address && a.domain == b.domain && a.port == b.port &&
         a.address_type == b.address_type;
}

bool same(bool a, bool b) { return a == b; }

/// Parses every prefix of `in` and checks it against the parse of the whole; returns the latter.
template <class Parse>
auto check_prefixes(Bytes in, Parse parse, bool length_is_input) {
  auto whole = parse(in);
  for (std::size_t k = 0; k < in.size(); ++k) {
    auto part = parse(in.first(k));
    if (!part) {
      FUZZ_CHECK(!whole, "an error became success with more bytes");
      continue;
    }
    if (!part->value) {
      FUZZ_CHECK(part->need > k, "incomplete, yet asks for no more bytes");
      continue;
    }
    FUZZ_CHECK(part->consumed <= k, "consumed more than it had");
    if (length_is_input) continue;  // unknown ATYP: the listener refuses whatever has arrived
    FUZZ_CHECK(whole && whole->value, "complete prefix, incomplete whole");
    FUZZ_CHECK(part->consumed == whole->consumed && same(*part->value, *whole->value), "prefix differs");
  }
  return whole;
}

std::vector<std::byte> encode_connect(const socks5::Request& r) {
  std::vector<std::byte> out{std::byte{5}, std::byte{r.command}, std::byte{0}};
  const auto raw = r.address->ip.bytes();
  out.push_back(std::byte{static_cast<std::uint8_t>(raw.size() == 4 ? 1 : 4)});
  for (char c : raw) out.push_back(static_cast<std::byte>(c));
  out.push_back(static_cast<std::byte>(r.port >> 8));
  out.push_back(static_cast<std::byte>(r.port & 0xff));
  return out;
}

void check_request(Bytes in) {
  // Unknown address types complete with `consumed` = what has arrived (documented), so prefixes of
  // those differ by design; they are known from byte 3.
  const bool unknown_atyp = in.size() >= 4 && std::to_integer<int>(in[3]) != 1 &&
                            std::to_integer<int>(in[3]) != 3 && std::to_integer<int>(in[3]) != 4;
  auto whole = check_prefixes(in, socks5::parse_request, unknown_atyp);
  if (!whole || !whole->value) return;
  const socks5::Request& r = *whole->value;
  FUZZ_CHECK(r.domain.size() <= 255, "domain over 255 bytes");
  FUZZ_CHECK(!(r.address && !r.domain.empty()), "both an address and a domain");
  if (r.address) {
    FUZZ_CHECK(r.address->port == r.port, "address port differs from port");
    const auto again = socks5::parse_request(encode_connect(r));
    FUZZ_CHECK(again && again->value && again->value->address == r.address, "re-encoded target differs");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Bytes in(reinterpret_cast<const std::byte*>(data), size);
  auto greeting = check_prefixes(in, socks5::parse_greeting, false);
  if (greeting && greeting->value) check_request(in.subspan(greeting->consumed));
  // A request may also be probed on its own (a client that skips ahead is refused either way).
  check_request(in);
  const auto reply = socks5::make_reply(socks5::Reply::kHostUnreachable);
  FUZZ_CHECK(reply[0] == std::byte{5} && reply[1] == std::byte{4}, "reply header");
  return 0;
}
