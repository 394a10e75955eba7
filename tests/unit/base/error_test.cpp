#include <gtest/gtest.h>

#include "base/error.hpp"

namespace meshnode::base {
namespace {

TEST(Error, MessageNamesCodeContextAndCause) {
  Result<int> r = fail(Errc::kPolicyDenied, "explicitly denied by: default/deny-all");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "policy_denied: explicitly denied by: default/deny-all");
  auto io = fail_errno("open /nope", ENOENT);
  EXPECT_EQ(io.error().code, Errc::kIo);
  EXPECT_NE(io.error().message().find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace meshnode::base
