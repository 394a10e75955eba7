#include "proxy/socks5.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace meshnode::proxy::socks5 {
namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

TEST(Socks5Greeting, NoAuthOfferedIncompleteAndBadVersion) {
  auto ok = parse_greeting(bytes({5, 2, 2, 0}));
  ASSERT_TRUE(ok);
  ASSERT_TRUE(ok->value);
  EXPECT_TRUE(*ok->value);
  EXPECT_EQ(ok->consumed, 4u);

  auto only_userpass = parse_greeting(bytes({5, 1, 2}));
  ASSERT_TRUE(only_userpass && only_userpass->value);
  EXPECT_FALSE(*only_userpass->value);

  auto partial = parse_greeting(bytes({5, 3, 0}));
  ASSERT_TRUE(partial);
  EXPECT_FALSE(partial->value);
  EXPECT_EQ(partial->need, 5u);

  auto v4 = parse_greeting(bytes({4, 1, 0}));
  ASSERT_FALSE(v4);
  EXPECT_EQ(v4.error().code, base::Errc::kProtocol);
}

TEST(Socks5Request, ParsesEachAddressType) {
  auto ipv4 = parse_request(bytes({5, 1, 0, 1, 198, 19, 2, 10, 0x1f, 0x90}));
  ASSERT_TRUE(ipv4 && ipv4->value);
  EXPECT_EQ(ipv4->value->address->to_string(), "198.19.2.10:8080");
  EXPECT_EQ(ipv4->consumed, 10u);

  auto ipv6 = parse_request(bytes({5, 1, 0, 4, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 80}));
  ASSERT_TRUE(ipv6 && ipv6->value);
  EXPECT_EQ(ipv6->value->address->to_string(), "[fd00::1]:80");

  auto domain = parse_request(bytes({5, 1, 0, 3, 3, 'f', 'o', 'o', 0, 80}));
  ASSERT_TRUE(domain && domain->value);
  EXPECT_FALSE(domain->value->address);
  EXPECT_EQ(domain->value->domain, "foo");
  EXPECT_EQ(domain->value->port, 80);

  auto unknown_type = parse_request(bytes({5, 1, 0, 9, 1, 2}));
  ASSERT_TRUE(unknown_type && unknown_type->value);
  EXPECT_FALSE(unknown_type->value->address);
  EXPECT_TRUE(unknown_type->value->domain.empty());

  auto bind = parse_request(bytes({5, 2, 0, 1, 1, 2, 3, 4, 0, 1}));
  ASSERT_TRUE(bind && bind->value);
  EXPECT_EQ(bind->value->command, 2);
}

TEST(Socks5Request, IncompleteAndMalformed) {
  auto partial = parse_request(bytes({5, 1, 0, 1, 198, 19}));
  ASSERT_TRUE(partial);
  EXPECT_FALSE(partial->value);
  EXPECT_EQ(partial->need, 10u);
  EXPECT_FALSE(parse_request(bytes({4, 1, 0, 1, 1, 2, 3, 4, 0, 1})));
  EXPECT_FALSE(parse_request(bytes({5, 1, 7, 1, 1, 2, 3, 4, 0, 1})));
}

TEST(Socks5Reply, Layout) {
  auto r = make_reply(Reply::kConnectionRefused);
  EXPECT_EQ(r[0], std::byte{5});
  EXPECT_EQ(r[1], std::byte{5});
  EXPECT_EQ(r[3], std::byte{1});
}

}  // namespace
}  // namespace meshnode::proxy::socks5
