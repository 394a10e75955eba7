#include <gtest/gtest.h>

#include "base/netns.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <thread>

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

// A fresh network namespace, made by a helper thread (unshare affects only that thread), or an
// error when the process may not create one (no CAP_SYS_ADMIN).
Result<Netns> fresh_netns() {
  Result<Netns> out = fail(Errc::kInternal, "not run");
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      out = fail_errno("unshare(CLONE_NEWNET)", errno);
      return;
    }
    out = Netns::current();
  }).join();
  return out;
}

bool ci() {
  const char* v = std::getenv("CI");
  return v != nullptr && std::string_view(v) == "true";
}

TEST(Netns, RunInRestoresTheThreadsNamespaceWhenTheFunctionThrows) {
  auto other = fresh_netns();
  if (!other) {
    if (ci()) FAIL() << "CI=true: " << other.error().message();
    GTEST_SKIP() << "needs CAP_SYS_ADMIN to create a network namespace: " << other.error().message();
  }
  auto home = Netns::current();
  ASSERT_TRUE(home) << home.error().message();
  ASSERT_FALSE(*other == *home);

  bool ran_inside = false;
  EXPECT_THROW(
      {
        auto entered = other->run_in([&] {
          auto inside = Netns::current();
          ran_inside = inside && *inside == *other;
          throw std::runtime_error("boom inside the pod netns");
        });
        (void)entered;  // not reached: the exception propagates
      },
      std::runtime_error);
  EXPECT_TRUE(ran_inside) << "fn must run inside the other namespace";
  auto after = Netns::current();
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_TRUE(*after == *home) << "the thread was left in the other namespace";

  // The depth bookkeeping was unwound too: a later (nested) call restores the right namespaces.
  bool nested_ok = false;
  auto outer = other->run_in([&] {
    auto inner = home->run_in([&] { nested_ok = Netns::current().value() == *home; });
    nested_ok = nested_ok && inner && Netns::current().value() == *other;
  });
  ASSERT_TRUE(outer) << outer.error().message();
  EXPECT_TRUE(nested_ok);
  EXPECT_TRUE(Netns::current().value() == *home);
}

}  // namespace
}  // namespace meshnode::base
