#include <arpa/inet.h>

#include <gtest/gtest.h>

#include "base/ip.hpp"
#include "base/spiffe.hpp"

namespace meshnode::base {
namespace {

TEST(SpiffeId, ParsesIstioIdentities) {
  auto id = SpiffeId::parse("spiffe://cluster.local/ns/default/sa/client");
  ASSERT_TRUE(id) << id.error().message();
  EXPECT_EQ(id->trust_domain, "cluster.local");
  EXPECT_EQ(id->ns, "default");
  EXPECT_EQ(id->service_account, "client");
  EXPECT_EQ(id->to_string(), "spiffe://cluster.local/ns/default/sa/client");
}

TEST(SpiffeId, RejectsEveryMalformedShapeWithTheText) {
  for (const char* bad : {"", "spiffe://", "http://cluster.local/ns/a/sa/b", "spiffe://cluster.local/ns/a/sa",
                          "spiffe://cluster.local/ns/a/sa/b/extra", "spiffe://cluster.local/namespace/a/sa/b",
                          "spiffe://cluster.local/ns/a/serviceaccount/b", "spiffe:///ns/a/sa/b",
                          "spiffe://cluster.local/ns//sa/b", "spiffe://cluster.local/ns/a/sa/",
                          // issue 11 defect 9: SPIFFE ID spec §2, no query and no fragment
                          "spiffe://cluster.local/ns/a/sa/zcli#frag", "spiffe://cluster.local/ns/a/sa/b?x=1",
                          "spiffe://cluster.local/ns/a/sa/b#", "spiffe://cluster.local?q/ns/a/sa/b"}) {
    auto id = SpiffeId::parse(bad);
    ASSERT_FALSE(id) << bad;
    EXPECT_EQ(id.error().code, Errc::kInvalidArgument);
    EXPECT_NE(id.error().context.find(bad), std::string::npos) << id.error().context;
  }
}

TEST(SocketAddr, ParsesAndFormatsBothFamilies) {
  EXPECT_EQ(SocketAddr::parse("198.19.2.10:8080")->to_string(), "198.19.2.10:8080");
  EXPECT_EQ(SocketAddr::parse("[fd00::1]:15008")->to_string(), "[fd00::1]:15008");
  for (const char* bad : {"198.19.2.10", "198.19.2.10:0", "198.19.2.10:65536", "fd00::1:80", "[fd00::1]", "host:80",
                          ":80", "1.2.3.4:8a", "[1.2.3.4]:80"}) {
    EXPECT_FALSE(SocketAddr::parse(bad)) << bad;
  }
  using namespace std::string_view_literals;
  EXPECT_FALSE(SocketAddr::parse("10.0.0.1\0:80"sv));
  EXPECT_FALSE(IpAddr::parse("10.0.0.1\0garbage"sv));
}

// IPv4 text is formatted by hand (not inet_ntop): every octet value in every position, and the
// extreme ports, must read exactly as inet_ntop and std::to_string write them.
TEST(IpAddr, V4TextMatchesInetNtopForEveryOctet) {
  for (int v = 0; v < 256; ++v) {
    const auto o = static_cast<std::uint8_t>(v);
    for (const std::array<std::uint8_t, 4>& b : {std::array<std::uint8_t, 4>{o, 0, 0, 0}, {1, o, 2, o}, {255, 255, 255, o}}) {
      char want[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, b.data(), want, sizeof(want));
      EXPECT_EQ(IpAddr::v4(b).to_string(), want);
      for (std::uint16_t port : {std::uint16_t{1}, std::uint16_t{9}, std::uint16_t{80}, std::uint16_t{65535}}) {
        EXPECT_EQ((SocketAddr{IpAddr::v4(b), port}.to_string()), std::string(want) + ":" + std::to_string(port));
      }
    }
  }
}

TEST(IpAddr, V4MappedNormalisesAndCidrContains) {
  auto mapped = IpAddr::parse("::ffff:198.19.1.10");
  ASSERT_TRUE(mapped);
  EXPECT_TRUE(mapped->is_v4());
  EXPECT_EQ(*mapped, *IpAddr::parse("198.19.1.10"));
  auto net = IpNet::parse("198.19.0.0/15");
  ASSERT_TRUE(net);
  EXPECT_TRUE(net->contains(*IpAddr::parse("198.18.0.1")));
  EXPECT_FALSE(net->contains(*IpAddr::parse("198.20.0.1")));
  EXPECT_FALSE(net->contains(*IpAddr::parse("fd00::1")));
  EXPECT_TRUE(IpNet::parse("fd00::/8")->contains(*IpAddr::parse("fd00::1")));
  EXPECT_FALSE(IpNet::parse("10.0.0.0/33"));
  EXPECT_TRUE(IpAddr::parse("127.0.0.2")->is_loopback());
  EXPECT_TRUE(IpAddr::parse("::1")->is_loopback());
}

}  // namespace
}  // namespace meshnode::base
