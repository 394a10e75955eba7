#include "http/http_message.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

namespace meshnode::http {
namespace {

constexpr std::string_view kCrlf = "\r\n";

bool is_tchar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (std::isalnum(u)) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

// Request-line bytes must be printable ASCII (a CR only as the start of the CRLF).
bool has_bad_request_line_byte(std::string_view line) {
  return std::any_of(line.begin(), line.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\r') || u >= 0x7f;
  });
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void parse_query(std::string_view query, std::map<std::string, std::string>& out) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    std::string key = percent_decode(pair.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
    out.insert_or_assign(std::move(key), std::move(value));
  }
}

// "METHOD SP origin-form SP HTTP/1.x" (without CRLF). Fills method/path/query; returns the minor
// version (0 or 1), or nullopt if malformed.
std::optional<int> parse_request_line(std::string_view line, HttpRequest& request) {
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) return std::nullopt;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method) || target.empty() || target.front() != '/') return std::nullopt;
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return std::nullopt;
  request.method = std::string(method);
  const auto q = target.find('?');
  request.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) parse_query(target.substr(q + 1), request.query);
  return version.back() - '0';
}

// One "name: value" field line (without CRLF) into `headers`; false if malformed.
bool parse_field_line(std::string_view line, std::map<std::string, std::string>& headers) {
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) return false;
  const std::string_view value = trim_ows(line.substr(colon + 1));
  const bool bad_value = std::any_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
  if (bad_value) return false;
  auto [it, inserted] = headers.try_emplace(to_lower(line.substr(0, colon)), value);
  if (!inserted) it->second += fmt::format(", {}", value);
  return true;
}

bool has_connection_token(std::string_view header, std::string_view token) {
  while (!header.empty()) {
    const auto comma = header.find(',');
    if (to_lower(trim_ows(header.substr(0, comma))) == token) return true;
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
  }
  return false;
}

// Applies Connection / Content-Length / Transfer-Encoding semantics; false if malformed.
bool apply_framing(ParsedHead& head, int minor_version) {
  const auto& headers = head.request.headers;
  const auto connection = headers.find("connection");
  const std::string_view conn = connection == headers.end() ? std::string_view() : connection->second;
  head.keep_alive =
      minor_version == 1 ? !has_connection_token(conn, "close") : has_connection_token(conn, "keep-alive");
  head.has_transfer_encoding = headers.contains("transfer-encoding");
  if (const auto cl = headers.find("content-length"); cl != headers.end()) {
    const std::string& s = cl->second;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), head.content_length);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return false;
  }
  return true;
}

HeadParse bad(std::string why) { return HeadParse{HeadStatus::kBad, {}, std::move(why)}; }

// The head is incomplete: fail early on a too-long buffer or a garbage request line.
HeadParse check_incomplete(std::string_view buffer) {
  if (buffer.size() >= kMaxHeadBytes) return HeadParse{HeadStatus::kTooLarge, {}, "request head over 8 KiB"};
  const auto eol = buffer.find(kCrlf);
  const std::string_view first = buffer.substr(0, eol);
  if (has_bad_request_line_byte(first)) return bad("non-HTTP bytes in request line");
  if (eol != std::string_view::npos) {
    HttpRequest scratch;
    if (!parse_request_line(first, scratch)) return bad("malformed request line");
  }
  return {};
}

}  // namespace

HeadParse parse_request_head(std::string_view buffer) {
  const auto end = buffer.find("\r\n\r\n");
  if (end == std::string_view::npos) return check_incomplete(buffer);
  const std::size_t head_bytes = end + 4;
  if (head_bytes > kMaxHeadBytes) return HeadParse{HeadStatus::kTooLarge, {}, "request head over 8 KiB"};
  HeadParse result{HeadStatus::kComplete, {}, {}};
  ParsedHead& head = result.head;
  head.head_bytes = head_bytes;
  std::string_view rest = buffer.substr(0, end + 2);  // every line keeps its CRLF
  const auto eol = rest.find(kCrlf);
  const std::string_view first = rest.substr(0, eol);
  if (has_bad_request_line_byte(first)) return bad("non-HTTP bytes in request line");
  const auto minor = parse_request_line(first, head.request);
  if (!minor) return bad("malformed request line");
  rest.remove_prefix(eol + 2);
  while (!rest.empty()) {
    const auto line_end = rest.find(kCrlf);
    if (!parse_field_line(rest.substr(0, line_end), head.request.headers))
      return bad("malformed header field");
    rest.remove_prefix(line_end + 2);
  }
  if (!apply_framing(head, *minor)) return bad("malformed Content-Length");
  return result;
}

std::string percent_decode(std::string_view text, bool plus_as_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 && hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else if (c == '+' && plus_as_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

HttpResponse method_not_allowed(std::string_view allowed) {
  HttpResponse response;
  response.status = 405;
  response.body = fmt::format("method not allowed, use {}\n", allowed);
  response.headers.emplace_back("Allow", std::string(allowed));
  return response;
}

std::string serialize_response(const HttpResponse& response, bool keep_alive, bool head_only) {
  std::string out =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", response.status,
                  reason_phrase(response.status), response.content_type, response.body.size());
  for (const auto& [name, value] : response.headers) out += fmt::format("{}: {}\r\n", name, value);
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head_only) out += response.body;
  return out;
}

}  // namespace meshnode::http
