#include <gtest/gtest.h>

#include <optional>

#include <cctype>
#include <string>
#include <vector>

#include "hbone/headers.hpp"

namespace meshnode::hbone {
namespace {

base::SocketAddr sa(std::string_view text) { return base::SocketAddr::parse(text).value(); }
base::HboneTarget target(std::string_view text) { return base::HboneTarget{sa(text)}; }
base::ClientAddr client(std::string_view text) { return base::ClientAddr{sa(text)}; }

std::vector<std::pair<std::string, std::string>> pairs(const h2::Headers& h) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : h) out.emplace_back(f.name, f.value);
  return out;
}

using Pairs = std::vector<std::pair<std::string, std::string>>;

TEST(ConnectHeaders, FullListInOrder) {
  ConnectInfo info{target("10.0.0.2:8080"), client("10.0.0.1:43210"), "echo.default.svc.cluster.local",
                   "k8s.cluster.name=Kubernetes,k8s.namespace.name=default",
                   "00-0123456789abcdef0123456789abcdef-0123456789abcdef-00"};
  EXPECT_EQ(pairs(connect_headers(info)),
            (Pairs{{":method", "CONNECT"},
                   {":authority", "10.0.0.2:8080"},
                   {"forwarded", "for=\"10.0.0.1:43210\";host=echo.default.svc.cluster.local"},
                   {"baggage", "k8s.cluster.name=Kubernetes,k8s.namespace.name=default"},
                   {"traceparent", "00-0123456789abcdef0123456789abcdef-0123456789abcdef-00"}}));
}

TEST(ConnectHeaders, MinimalHasNoHostBaggageOrTraceparentAndNoSchemeOrPath) {
  ConnectInfo info{target("10.0.0.2:80"), client("10.0.0.1:5000"), "", "", ""};
  EXPECT_EQ(pairs(connect_headers(info)), (Pairs{{":method", "CONNECT"},
                                                 {":authority", "10.0.0.2:80"},
                                                 {"forwarded", "for=\"10.0.0.1:5000\""}}));
}

TEST(ConnectHeaders, Ipv6AddressesAreBracketed) {
  ConnectInfo info{target("[fd00::2]:8080"), client("[fd00::1]:43210"), "", "", ""};
  auto h = pairs(connect_headers(info));
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[1], (std::pair<std::string, std::string>{":authority", "[fd00::2]:8080"}));
  // RFC 7239 §6: an IPv6 node with a port is quoted and bracketed.
  EXPECT_EQ(h[2], (std::pair<std::string, std::string>{"forwarded", "for=\"[fd00::1]:43210\""}));
}

TEST(ConnectHeaders, NamesAreLowercase) {
  ConnectInfo info{target("10.0.0.2:80"), client("10.0.0.1:5000"), "h", "b=1", make_traceparent(1, 2, 3)};
  for (const auto& f : connect_headers(info)) {
    for (char c : f.name) EXPECT_FALSE(std::isupper(static_cast<unsigned char>(c))) << f.name;
  }
}

TEST(Traceparent, W3cFormat) {
  EXPECT_EQ(make_traceparent(0x0123456789abcdefULL, 0xfedcba9876543210ULL, 1),
            "00-0123456789abcdeffedcba9876543210-0000000000000001-00");
  auto max = make_traceparent(~0ULL, ~0ULL, ~0ULL);
  EXPECT_EQ(max, "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-00");
  EXPECT_EQ(max.size(), 55u);
  auto small = make_traceparent(0, 1, 0x10);
  ASSERT_EQ(small.size(), 55u);
  EXPECT_EQ(small, "00-00000000000000000000000000000001-0000000000000010-00");
  EXPECT_EQ(small[2], '-');
  EXPECT_EQ(small[35], '-');
  EXPECT_EQ(small[52], '-');
  EXPECT_EQ(small.find('\0'), std::string::npos);
}

struct AuthorityCase {
  std::string_view text;
  bool ok;
  std::string_view normalised;  // to_string() of the parsed address when ok
};

TEST(ParseAuthority, Table) {
  const AuthorityCase cases[] = {
      {"10.0.0.1:8080", true, "10.0.0.1:8080"},
      {"255.255.255.255:65535", true, "255.255.255.255:65535"},
      {"10.0.0.1:1", true, "10.0.0.1:1"},
      {"[fd00::1]:80", true, "[fd00::1]:80"},
      {"[::1]:15008", true, "[::1]:15008"},
      {"[::ffff:10.0.0.1]:80", true, "10.0.0.1:80"},  // mapped v4 is the v4 workload
      {"10.0.0.1", false, ""},                        // missing port
      {"10.0.0.1:", false, ""},
      {"[fd00::1]", false, ""},
      {"[fd00::1]:", false, ""},
      {"10.0.0.1:0", false, ""},
      {"10.0.0.1:65536", false, ""},
      {"10.0.0.1:99999999999", false, ""},
      {"10.0.0.1:-1", false, ""},
      {"10.0.0.1:80x", false, ""},
      {"10.0.0.1: 80", false, ""},
      {"10.0.0.1:80 ", false, ""},
      {"fd00::1:80", false, ""},  // v6 without brackets
      {"[fd00::1]80", false, ""},
      {"[fd00::1:80", false, ""},
      {"echo.default.svc.cluster.local:80", false, ""},  // hostname (double HBONE): not yet
      {"localhost:80", false, ""},
      {"", false, ""},
      {":", false, ""},
      {":80", false, ""},
      {"10.0.0.256:80", false, ""},
      {"10.0.0:80", false, ""},
      {"GET / HTTP/1.1", false, ""},
      {std::string_view("10.0.0.1\0:80", 12), false, ""},
  };
  for (const auto& c : cases) {
    auto got = parse_authority(c.text);
    EXPECT_EQ(got.has_value(), c.ok) << "'" << c.text << "'";
    if (got && c.ok) {
      EXPECT_EQ(got->to_string(), c.normalised);
    } else if (!got) {
      EXPECT_EQ(got.error().code, base::Errc::kInvalidArgument) << "'" << c.text << "'";
    }
  }
}

TEST(ParseAuthority, HostnameErrorNamesTheText) {
  auto got = parse_authority("echo.default.svc.cluster.local:80");
  ASSERT_FALSE(got);
  EXPECT_NE(got.error().message().find("echo.default.svc.cluster.local:80"), std::string::npos)
      << got.error().message();
}

TEST(ParseAuthority, RoundTripsConnectHeaders) {
  for (std::string_view text : {"10.1.2.3:9080", "[2001:db8::7]:443"}) {
    ConnectInfo info{target(text), client("10.0.0.1:1"), "", "", ""};
    auto h = connect_headers(info);
    auto back = parse_authority(h[1].value);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->addr, sa(text));
  }
}

TEST(ConnectHeaders, ForwardedNamesTheClientAndTheServiceHost) {
  ConnectInfo info{target("10.0.0.2:80"), client("[fd00::1]:5000"), "svc.ns.svc.cluster.local", "", ""};
  auto h = connect_headers(info);
  ASSERT_GE(h.size(), 3u);
  EXPECT_EQ(h[2].name, "forwarded");
  EXPECT_EQ(h[2].value, "for=\"[fd00::1]:5000\";host=svc.ns.svc.cluster.local");
}

// Issue 11 defect 7: the peer's traceparent became the connection id of every log line as long as
// it was 55 bytes, so spaces and tabs could forge access-log fields. W3C Trace Context §3.2.
TEST(TraceparentTraceId, AcceptsOnlyW3cFormat) {
  const std::string good = make_traceparent(0x0123456789abcdef, 0xfedcba9876543210, 42);
  ASSERT_EQ(traceparent_trace_id(good), std::optional<std::string_view>("0123456789abcdeffedcba9876543210"));
  EXPECT_TRUE(traceparent_trace_id("01-0123456789abcdef0123456789abcdef-0123456789abcdef-01-future"));
  for (std::string_view bad : {
           "", "00", "00-0123456789abcdef0123456789abcdef-0123456789abcdef-0",
           "00-0123456789abcdef0123456789abcd f-0123456789abcdef-01",  // a space forging a field
           "00-0123456789abcdef0123456789abcd\tf-0123456789abcdef-01",
           "00-0123456789ABCDEF0123456789abcdef-0123456789abcdef-01",  // upper case
           "00-00000000000000000000000000000000-0123456789abcdef-01",  // all-zero trace id
           "00-0123456789abcdef0123456789abcdef-0000000000000000-01",  // all-zero parent id
           "ff-0123456789abcdef0123456789abcdef-0123456789abcdef-01",  // forbidden version
           "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01-x",  // version 00 has no suffix
           "01-0123456789abcdef0123456789abcdef-0123456789abcdef-01x",
           "01-0123456789abcdef0123456789abcdef-0123456789abcdef-01- a=b",
           "00_0123456789abcdef0123456789abcdef_0123456789abcdef_01"}) {
    EXPECT_FALSE(traceparent_trace_id(bad)) << bad;
  }
}

}  // namespace
}  // namespace meshnode::hbone
