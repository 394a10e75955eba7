#include "cni/http.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace meshnode::cni {

namespace {

using base::Errc;
using base::fail;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct Head {
  int status = 0;
  std::optional<std::size_t> content_length;
  bool chunked = false;
};

base::Result<Head> parse_head(std::string_view head) {
  const auto eol = head.find("\r\n");
  const std::string_view status_line = head.substr(0, eol);
  // "HTTP/1.x SSS[ reason]"
  if (status_line.size() < 12 || !status_line.starts_with("HTTP/1.") || status_line[8] != ' ' ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return fail(Errc::kProtocol, "bad status line '" + std::string(status_line.substr(0, 64)) + "'");
  }
  Head h;
  auto [ptr, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, h.status);
  if (ec != std::errc{} || ptr != status_line.data() + 12 || h.status < 100) {
    return fail(Errc::kProtocol, "bad status code in '" + std::string(status_line.substr(0, 64)) + "'");
  }
  std::string_view rest = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
  while (!rest.empty()) {
    const auto end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return fail(Errc::kProtocol, "bad header line '" + std::string(line.substr(0, 64)) + "'");
    }
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      std::size_t n = 0;
      auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (e != std::errc{} || p != value.data() + value.size() ||
          (h.content_length && *h.content_length != n)) {
        return fail(Errc::kProtocol, "bad Content-Length '" + std::string(value) + "'");
      }
      h.content_length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      h.chunked = value.size() >= 7 && iequals(value.substr(value.size() - 7), "chunked");
    }
  }
  return h;
}

/// De-chunks `data`; nullopt if incomplete.
base::Result<std::optional<std::string>> dechunk(std::string_view data) {
  std::string body;
  while (true) {
    const auto eol = data.find("\r\n");
    if (eol == std::string_view::npos) return std::nullopt;
    std::string_view size_text = data.substr(0, eol);
    size_text = trim(size_text.substr(0, size_text.find(';')));
    std::size_t size = 0;
    auto [p, e] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (e != std::errc{} || p != size_text.data() + size_text.size() || size > kMaxResponseBytes) {
      return fail(Errc::kProtocol, "bad chunk size '" + std::string(size_text.substr(0, 32)) + "'");
    }
    data.remove_prefix(eol + 2);
    if (size == 0) {
      // Trailer section ends with an empty line.
      while (true) {
        const auto end = data.find("\r\n");
        if (end == std::string_view::npos) return std::nullopt;
        if (end == 0) return body;
        data.remove_prefix(end + 2);
      }
    }
    if (data.size() < size + 2) return std::nullopt;
    if (data.substr(size, 2) != "\r\n") return fail(Errc::kProtocol, "chunk not followed by CRLF");
    body.append(data.substr(0, size));
    data.remove_prefix(size + 2);
  }
}

}  // namespace

std::string build_post(std::string_view path, std::string_view body) {
  std::string req;
  req.reserve(160 + body.size());
  req.append("POST ").append(path).append(" HTTP/1.1\r\n");
  req.append("Host: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n");
  req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n");
  req.append(body);
  return req;
}

base::Result<std::optional<HttpReply>> parse_response(std::string_view bytes, bool eof) {
  if (bytes.size() > kMaxResponseBytes) return fail(Errc::kProtocol, "agent response larger than 1 MiB");
  while (true) {
    const auto head_end = bytes.find("\r\n\r\n");
    if (head_end == std::string_view::npos) {
      if (eof)
        return fail(Errc::kProtocol, bytes.empty() ? "agent closed the connection without a response"
                                                   : "agent response headers truncated");
      return std::nullopt;
    }
    auto head = parse_head(bytes.substr(0, head_end));
    if (!head) return std::unexpected(head.error());
    std::string_view data = bytes.substr(head_end + 4);
    if (head->status < 200 && head->status != 101) {
      bytes = data;  // interim response (100 Continue): the real one follows
      continue;
    }
    HttpReply reply{head->status, {}};
    if (head->status == 204 || head->status == 304) return reply;
    if (head->chunked) {
      auto body = dechunk(data);
      if (!body) return std::unexpected(body.error());
      if (!*body) {
        if (eof) return fail(Errc::kProtocol, "agent response body truncated (chunked)");
        return std::nullopt;
      }
      reply.body = std::move(**body);
      return reply;
    }
    if (head->content_length) {
      if (data.size() < *head->content_length) {
        if (eof) return fail(Errc::kProtocol, "agent response body truncated");
        return std::nullopt;
      }
      reply.body = std::string(data.substr(0, *head->content_length));
      return reply;
    }
    if (!eof) return std::nullopt;
    reply.body = std::string(data);
    return reply;
  }
}

}  // namespace meshnode::cni
