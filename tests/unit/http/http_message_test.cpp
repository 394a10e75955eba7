#include "http/http_message.hpp"

#include <gtest/gtest.h>

#include <string>

namespace meshnode::http {
namespace {

TEST(ParseRequestHead, CompleteRequestWithQueryAndHeaders) {
  const std::string raw =
      "GET /logging?level=debug&x=a%20b+c&flag HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a:  2 \r\n\r\nrest";
  HeadParse p = parse_request_head(raw);
  ASSERT_EQ(p.status, HeadStatus::kComplete) << p.error;
  EXPECT_EQ(p.head.request.method, "GET");
  EXPECT_EQ(p.head.request.path, "/logging");
  EXPECT_EQ(p.head.request.query.at("level"), "debug");
  EXPECT_EQ(p.head.request.query.at("x"), "a b c");
  EXPECT_EQ(p.head.request.query.at("flag"), "");
  EXPECT_EQ(p.head.request.headers.at("host"), "x");
  EXPECT_EQ(p.head.request.headers.at("x-a"), "1, 2");
  EXPECT_TRUE(p.head.keep_alive);
  EXPECT_EQ(p.head.head_bytes, raw.size() - 4);
}

TEST(ParseRequestHead, ConnectionSemantics) {
  struct Case {
    const char* raw;
    bool keep_alive;
  };
  const Case cases[] = {
      {"GET / HTTP/1.1\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nConnection: upgrade, close\r\n\r\n", false},
      {"GET / HTTP/1.0\r\n\r\n", false},
      {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
  };
  for (const auto& c : cases) {
    HeadParse p = parse_request_head(c.raw);
    ASSERT_EQ(p.status, HeadStatus::kComplete) << c.raw;
    EXPECT_EQ(p.head.keep_alive, c.keep_alive) << c.raw;
  }
}

TEST(ParseRequestHead, RejectsGarbageAndDetectsItEarly) {
  struct Case {
    std::string raw;
    HeadStatus status;
  };
  const Case cases[] = {
      {"GET / HTTP/1.1\r\n", HeadStatus::kIncomplete},
      {"GE", HeadStatus::kIncomplete},
      {std::string("\x16\x03\x01\x02\x00", 5), HeadStatus::kBad},  // a TLS ClientHello
      {"hello world\r\n", HeadStatus::kBad},
      {"GET / HTTP/2.0\r\n\r\n", HeadStatus::kBad},
      {"GET relative HTTP/1.1\r\n\r\n", HeadStatus::kBad},
      {"GET  / HTTP/1.1\r\n\r\n", HeadStatus::kBad},
      {"GET / HTTP/1.1\r\nno colon\r\n\r\n", HeadStatus::kBad},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", HeadStatus::kBad},
      {"GET / HTTP/1.1\r\n folded: x\r\n\r\n", HeadStatus::kBad},
      {"GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", HeadStatus::kBad},
      {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", HeadStatus::kBad},
      {"GET / HTTP/1.1\r\nX: a\x01"
       "b\r\n\r\n",
       HeadStatus::kBad},
      {"GET / HTTP/1.1\r\nX: " + std::string(kMaxHeadBytes, 'a'), HeadStatus::kTooLarge},
      {"GET / HTTP/1.1\r\nX: " + std::string(kMaxHeadBytes, 'a') + "\r\n\r\n", HeadStatus::kTooLarge},
  };
  for (const auto& c : cases) EXPECT_EQ(parse_request_head(c.raw).status, c.status) << c.raw;
}

TEST(ParseRequestHead, FramingFields) {
  HeadParse p = parse_request_head("POST /x HTTP/1.1\r\nContent-Length: 12\r\n\r\n");
  ASSERT_EQ(p.status, HeadStatus::kComplete);
  EXPECT_EQ(p.head.content_length, 12u);
  EXPECT_FALSE(p.head.has_transfer_encoding);
  p = parse_request_head("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(p.status, HeadStatus::kComplete);
  EXPECT_TRUE(p.head.has_transfer_encoding);
}

TEST(PercentDecode, DecodesAndKeepsMalformedEscapes) {
  EXPECT_EQ(percent_decode("a%2Fb%3d", false), "a/b=");
  EXPECT_EQ(percent_decode("a+b", false), "a+b");
  EXPECT_EQ(percent_decode("a+b", true), "a b");
  EXPECT_EQ(percent_decode("100%", true), "100%");
  EXPECT_EQ(percent_decode("%zz%4", true), "%zz%4");
}

TEST(SerializeResponse, StatusHeadersAndBody) {
  HttpResponse r{.status = 405, .body = "no\n", .headers = {{"Allow", "POST"}}};
  EXPECT_EQ(
      serialize_response(r, true, false),
      "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n"
      "Allow: POST\r\nConnection: keep-alive\r\n\r\nno\n");
  EXPECT_EQ(serialize_response(HttpResponse{.body = "abc"}, false, true),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n"
            "Connection: close\r\n\r\n");
}

}  // namespace
}  // namespace meshnode::http
