#include "agent/policy.hpp"

#include <gtest/gtest.h>

#include "agent/pod_store.hpp"

namespace meshnode::agent {
namespace {

TEST(EnrollmentPolicy, Table) {
  auto policy = parse_policy(R"(
enrollNamespaces: [shop, "team-*"]
enrollPodNamePatterns: ["web-*", "db-?"]
excludeNamespaces: [kube-system, team-secret]
)");
  ASSERT_TRUE(policy) << policy.error().message();
  struct Case {
    const char* ns;
    const char* name;
    bool enroll;
    const char* reason_part;
  };
  const Case cases[] = {
      {"shop", "anything", true, "namespace shop is enrolled"},
      {"team-a", "x", true, "(team-*)"},
      {"team-secret", "x", false, "excluded"},
      {"kube-system", "web-1", false, "namespace kube-system is excluded"},
      {"other", "web-1", true, "pod name matches web-*"},
      {"other", "db-1", true, "db-?"},
      {"other", "db-12", false, "no enrollment rule matches other/db-12"},
      {"other", "api", false, "no enrollment rule"},
      {"shopping", "api", false, "no enrollment rule"},
  };
  for (const Case& c : cases) {
    const Enrollment e = decide(*policy, c.ns, c.name);
    EXPECT_EQ(e.enroll, c.enroll) << c.ns << "/" << c.name;
    EXPECT_NE(e.reason.find(c.reason_part), std::string::npos) << e.reason;
  }
}

TEST(EnrollmentPolicy, DefaultsExcludeKubeSystem) {
  auto empty = parse_policy("");
  ASSERT_TRUE(empty);
  EXPECT_FALSE(decide(*empty, "default", "p").enroll);
  auto all = parse_policy("enrollNamespaces: ['*']");
  ASSERT_TRUE(all);
  EXPECT_TRUE(decide(*all, "default", "p").enroll);
  EXPECT_FALSE(decide(*all, "kube-system", "coredns").enroll);
  auto none_excluded = parse_policy("enrollNamespaces: ['*']\nexcludeNamespaces: []");
  ASSERT_TRUE(none_excluded);
  EXPECT_TRUE(decide(*none_excluded, "kube-system", "coredns").enroll);
}

TEST(EnrollmentPolicy, BadFilesNameTheKey) {
  struct Case {
    const char* yaml;
    const char* error_part;
  };
  const Case cases[] = {
      {"enrollNamespaces: shop", "enrollNamespaces: must be a list"},
      {"enrollPodNamePatterns: [[a]]", "enrollPodNamePatterns: entries must be non-empty strings"},
      {"excludeNamespaces: ['']", "excludeNamespaces: entries"},
      {"enrolNamespaces: [a]", "unknown key enrolNamespaces"},
      {"[a, b]", "top level must be a map"},
      {"a: [", "policy YAML"},
  };
  for (const Case& c : cases) {
    auto policy = parse_policy(c.yaml);
    ASSERT_FALSE(policy) << c.yaml;
    EXPECT_EQ(policy.error().code, base::Errc::kConfig);
    EXPECT_NE(policy.error().context.find(c.error_part), std::string::npos) << policy.error().context;
  }
}

TEST(PodRecord, JsonRoundTrip) {
  const PodRecord record{"uid-1", "p", "ns", "sa", "/var/run/netns/p", {"10.0.0.1", "fd00::1"}};
  auto back = record_from_json(to_json(record));
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*back, record);
  EXPECT_FALSE(record_from_json(R"({"uid":"u"})"));
  EXPECT_FALSE(record_from_json("nope"));
}

}  // namespace
}  // namespace meshnode::agent
