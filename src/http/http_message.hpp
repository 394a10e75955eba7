#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshnode::http {

/// One HTTP/1.x request as handlers see it (the body is never passed on).
struct HttpRequest {
  std::string method;                          ///< as sent, e.g. "GET" (case-sensitive per RFC 9110)
  std::string path;                            ///< target path before '?', not percent-decoded
  std::map<std::string, std::string> query;    ///< percent-decoded ('+' = space); last duplicate wins
  std::map<std::string, std::string> headers;  ///< lowercased names; duplicates joined with ", "
};

/// A complete response. Content-Length and Connection are added by the server.
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  /// Extra header lines {name, value}, e.g. {"Allow", "GET"} on a 405.
  std::vector<std::pair<std::string, std::string>> headers;
  /// Runs once on the server's io_context thread after the response was written (or the write
  /// failed): lets a handler act after replying, e.g. /quitquitquit starting shutdown.
  std::function<void()> after_response;
};

/// 405 naming the allowed method(s) in the body and in `Allow` (RFC 9110 §15.5.6), e.g. "GET".
[[nodiscard]] HttpResponse method_not_allowed(std::string_view allowed);

/// Handles one request; runs on the server's io_context thread and must not block.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

/// Limit on request line + headers, including the final CRLF CRLF (ztunnel: 8 KiB buffer).
inline constexpr std::size_t kMaxHeadBytes = 8 * 1024;
/// Limit on a Content-Length body that is read and discarded.
inline constexpr std::uint64_t kMaxBodyBytes = 8 * 1024;

/// Outcome of looking at the front of a connection's receive buffer.
enum class HeadStatus {
  kIncomplete,  ///< no CRLF CRLF yet and nothing wrong so far: read more
  kComplete,    ///< `head` is filled
  kBad,         ///< not HTTP/1.x (→ 400)
  kTooLarge,    ///< head exceeds kMaxHeadBytes (→ 431)
};

/// A parsed request head and what the connection needs from it.
struct ParsedHead {
  HttpRequest request;
  bool keep_alive = true;  ///< HTTP/1.1 default, `Connection: close` honoured; 1.0 opt-in
  std::uint64_t content_length = 0;
  bool has_transfer_encoding = false;  ///< request bodies with a transfer coding are unsupported
  std::size_t head_bytes = 0;          ///< bytes consumed from the buffer (through CRLF CRLF)
};

struct HeadParse {
  HeadStatus status = HeadStatus::kIncomplete;
  ParsedHead head;    ///< valid when status == kComplete
  std::string error;  ///< why, when kBad/kTooLarge (for debug logs)
};

/// Parses the request head (RFC 9112 §2-5, strict CRLF) at the front of `buffer`. Detects garbage
/// early: a request line with control or non-ASCII bytes is kBad before its CRLF arrives. Pure.
[[nodiscard]] HeadParse parse_request_head(std::string_view buffer);

/// Decodes %XX escapes (and '+' as space when `plus_as_space`); malformed escapes stay literal.
[[nodiscard]] std::string percent_decode(std::string_view text, bool plus_as_space);

/// "HTTP/1.1 <status> <reason>" + Content-Type, Content-Length, Connection, extra headers, body.
/// `head_only` omits the body (HEAD requests) but keeps its Content-Length.
[[nodiscard]] std::string serialize_response(const HttpResponse& response, bool keep_alive, bool head_only);

/// Standard reason phrase for `status` ("Unknown" for codes we never send).
[[nodiscard]] std::string_view reason_phrase(int status) noexcept;

}  // namespace meshnode::http
