#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/error.hpp"
#include "base/ip.hpp"

namespace meshnode::proxy::socks5 {

/// SOCKS5 (RFC 1928) pieces the proxy's 15080 listener needs: no authentication, CONNECT only.
/// Pure functions over bytes so they can be table-tested and fuzzed.

inline constexpr std::uint8_t kVersion = 5;
inline constexpr std::uint8_t kNoAuth = 0x00;
inline constexpr std::uint8_t kNoAcceptableMethod = 0xff;

/// Reply codes (RFC 1928 §6).
enum class Reply : std::uint8_t {
  kSucceeded = 0x00,
  kGeneralFailure = 0x01,
  kNotAllowed = 0x02,
  kHostUnreachable = 0x04,
  kConnectionRefused = 0x05,
  kCommandNotSupported = 0x07,
  kAddressTypeNotSupported = 0x08,
};

/// Result of parsing a message that may not have fully arrived yet.
template <class T>
struct Parsed {
  std::optional<T> value;    ///< set once complete
  std::size_t consumed = 0;  ///< bytes used when complete
  std::size_t need = 0;      ///< total bytes needed so far when incomplete (a lower bound)
};

/// Greeting "VER NMETHODS METHODS…": whether "no authentication" was offered.
/// Errc::kProtocol when VER is not 5.
[[nodiscard]] base::Result<Parsed<bool>> parse_greeting(std::span<const std::byte> in);

/// A CONNECT request's target. Domain names are reported (not resolved) so the caller can refuse
/// them clearly: meshnode has no DNS resolution yet.
struct Request {
  std::uint8_t command = 0;  ///< 1 = CONNECT, 2 = BIND, 3 = UDP ASSOCIATE
  std::optional<base::SocketAddr> address;
  std::string domain;        ///< set for ATYP 3
  std::uint16_t port = 0;
  std::uint8_t address_type = 0;
};

/// "VER CMD RSV ATYP DST.ADDR DST.PORT". Errc::kProtocol for VER ≠ 5 or RSV ≠ 0;
/// an unknown ATYP parses with `address` empty and `domain` empty (reply 0x08).
[[nodiscard]] base::Result<Parsed<Request>> parse_request(std::span<const std::byte> in);

/// "VER REP RSV ATYP=1 0.0.0.0 0": the reply sent once the upstream is (or is not) connected.
[[nodiscard]] std::array<std::byte, 10> make_reply(Reply reply);

}  // namespace meshnode::proxy::socks5
