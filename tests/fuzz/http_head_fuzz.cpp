// libFuzzer target for the HTTP/1.1 request-head parser (RFC 9112 §2-5; http/http_message) behind
// the admin, metrics, readiness, agent health and plugin-event servers. The servers re-parse their
// buffer as bytes arrive, so the result must not depend on how TCP split the request: a head that
// parses complete is seen as incomplete (never refused) at every shorter prefix, bytes after it
// (a body, a pipelined request) change nothing, and the 8 KiB limit holds. An accepted head keeps
// the documented shapes: token method, origin-form path, lowercase token header names, no control
// bytes in values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"
#include "http/http_message.hpp"

namespace {

namespace http = meshnode::http;

bool same(const http::ParsedHead& a, const http::ParsedHead& b) {
  return a.request.method == b.request.method && a.request.path == b.request.path &&
         a.request.query == b.request.query && a.request.headers == b.request.headers &&
         a.keep_alive == b.keep_alive && a.content_length == b.content_length &&
         a.has_transfer_encoding == b.has_transfer_encoding && a.head_bytes == b.head_bytes;
}

bool is_token_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

void check_complete(std::string_view buffer, const http::ParsedHead& head) {
  FUZZ_CHECK(head.head_bytes <= http::kMaxHeadBytes && head.head_bytes <= buffer.size(), "head over the limit");
  FUZZ_CHECK(buffer.substr(0, head.head_bytes).ends_with("\r\n\r\n"), "head does not end with CRLF CRLF");
  FUZZ_CHECK(buffer.substr(0, head.head_bytes - 2).find("\r\n\r\n") == std::string_view::npos,
             "head runs past the first empty line");
  const auto& req = head.request;
  FUZZ_CHECK(!req.method.empty() && std::all_of(req.method.begin(), req.method.end(), is_token_char), "method");
  FUZZ_CHECK(req.path.starts_with("/") && req.path.find('?') == std::string::npos, "path");
  for (const auto& [name, value] : req.headers) {
    FUZZ_CHECK(!name.empty() && std::all_of(name.begin(), name.end(), is_token_char), "header name not a token");
    FUZZ_CHECK(std::none_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }), "uppercase");
    FUZZ_CHECK(std::none_of(value.begin(), value.end(),
                            [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f; }),
               "control byte in a header value");
  }
  if (req.headers.contains("content-length")) {
    FUZZ_CHECK(std::to_string(head.content_length).size() <= req.headers.at("content-length").size(),
               "Content-Length value differs from its text");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view buffer(reinterpret_cast<const char*>(data), size);
  const http::HeadParse whole = http::parse_request_head(buffer);
  if (whole.status == http::HeadStatus::kIncomplete) {
    FUZZ_CHECK(buffer.size() < http::kMaxHeadBytes, "incomplete past the limit");
    return 0;
  }
  if (whole.status != http::HeadStatus::kComplete) return 0;
  check_complete(buffer, whole.head);
  // What follows the head must not matter.
  const auto exact = http::parse_request_head(buffer.substr(0, whole.head.head_bytes));
  FUZZ_CHECK(exact.status == http::HeadStatus::kComplete && same(exact.head, whole.head), "trailing bytes matter");
  // Every shorter prefix is "read more"; cap the work on long heads at every 7th length plus the
  // last 8 (where the empty line arrives).
  const std::size_t n = whole.head.head_bytes;
  for (std::size_t k = 0; k < n; k += (n > 512 && k + 8 < n) ? 7 : 1) {
    FUZZ_CHECK(http::parse_request_head(buffer.substr(0, k)).status == http::HeadStatus::kIncomplete,
               "a prefix of a good head is refused");
  }
  const std::string decoded = http::percent_decode(whole.head.request.path, false);
  FUZZ_CHECK(decoded.size() <= whole.head.request.path.size(), "percent_decode grew");
  return 0;
}
