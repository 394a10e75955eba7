#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::cni {

/// Largest agent response we accept (headers + body). Agent replies are a status and a reason.
inline constexpr std::size_t kMaxResponseBytes = 1 << 20;

/// One HTTP/1.1 response from the node agent.
struct HttpReply {
  int status = 0;    ///< e.g. 200, 400, 500
  std::string body;  ///< de-chunked body bytes
};

/// Serialises `POST <path> HTTP/1.1` with `Host: localhost`, `Content-Type: application/json`,
/// `Content-Length` and `Connection: close` (one request per connection, as the reference plugin's
/// Go client effectively does for a single-shot process).
[[nodiscard]] std::string build_post(std::string_view path, std::string_view body);

/// Parses the response in `bytes` (everything received so far). `eof`: the peer closed its side.
/// @returns the reply once complete; nullopt if more bytes are needed; Errc::kProtocol for a
///          malformed status line/header/chunk, a truncated message at EOF, or more than
///          kMaxResponseBytes. Skips interim 1xx responses. Body framing per RFC 9112 §6:
///          chunked, else Content-Length, else until EOF. Pure.
[[nodiscard]] base::Result<std::optional<HttpReply>> parse_response(std::string_view bytes, bool eof);

}  // namespace meshnode::cni
