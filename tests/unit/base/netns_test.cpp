#include <gtest/gtest.h>

#include "base/netns.hpp"

namespace meshnode::base {
namespace {

TEST(Netns, CurrentEqualsItselfAndOpenFailsWithPath) {
  auto a = Netns::current();
  auto b = Netns::open("/proc/self/ns/net");
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_TRUE(*a == *b);
  auto missing = Netns::open("/nonexistent/netns");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("/nonexistent/netns"), std::string::npos);
}

}  // namespace
}  // namespace meshnode::base
