// The enrollment decision as a table: pod label x namespace label, then every exclusion across
// the whole label grid, then phase and deletion.
#include <gtest/gtest.h>

#include "kube/enrollment.hpp"

namespace meshnode::kube {
namespace {

using R = EnrollmentReason;

Pod make_pod(const char* pod_mode) {
  Pod pod;
  pod.metadata.name = "web";
  pod.metadata.namespace_ = "shop";
  pod.metadata.uid = "uid-web";
  pod.phase = "Running";
  pod.pod_ips = {"10.0.0.5"};
  if (pod_mode) pod.metadata.labels = StringMap({{"istio.io/dataplane-mode", pod_mode}, {"app", "web"}});
  return pod;
}

std::optional<Namespace> make_ns(const char* ns_mode, bool known) {
  if (!known) return std::nullopt;
  Namespace ns;
  ns.metadata.name = "shop";
  ns.metadata.uid = "uid-shop";
  if (ns_mode) ns.metadata.labels = StringMap({{"istio.io/dataplane-mode", ns_mode}});
  return ns;
}

struct LabelRow {
  const char* pod_mode;  // nullptr = label absent
  const char* ns_mode;
  bool ns_known;
  EnrollmentDecision expected;
};

// The whole pod-label x namespace-label grid, each expectation written out.
const LabelRow kGrid[] = {
    {nullptr, nullptr, true, {false, R::kNotSelected}},
    {nullptr, "ambient", true, {true, R::kNamespaceLabel}},
    {nullptr, "none", true, {false, R::kNotSelected}},
    {nullptr, "sidecar", true, {false, R::kNotSelected}},
    {nullptr, nullptr, false, {false, R::kNamespaceUnknown}},
    {"ambient", nullptr, true, {true, R::kPodLabel}},
    {"ambient", "ambient", true, {true, R::kPodLabel}},
    {"ambient", "none", true, {true, R::kPodLabel}},
    {"ambient", "sidecar", true, {true, R::kPodLabel}},
    {"ambient", nullptr, false, {true, R::kPodLabel}},
    {"none", nullptr, true, {false, R::kPodOptedOut}},
    {"none", "ambient", true, {false, R::kPodOptedOut}},
    {"none", "none", true, {false, R::kPodOptedOut}},
    {"none", "sidecar", true, {false, R::kPodOptedOut}},
    {"none", nullptr, false, {false, R::kPodOptedOut}},
    {"other", nullptr, true, {false, R::kNotSelected}},
    {"other", "ambient", true, {true, R::kNamespaceLabel}},  // NotIn [none]: any other value passes
    {"other", "none", true, {false, R::kNotSelected}},
    {"other", "sidecar", true, {false, R::kNotSelected}},
    {"other", nullptr, false, {false, R::kNamespaceUnknown}},
    {"", "ambient", true, {true, R::kNamespaceLabel}},
    {"", nullptr, true, {false, R::kNotSelected}},
};

std::string describe(const LabelRow& row) {
  return std::string("pod=") + (row.pod_mode ? row.pod_mode : "<absent>") +
         " ns=" + (row.ns_known ? (row.ns_mode ? row.ns_mode : "<absent>") : "<unknown>");
}

EnrollmentDecision decide(const Pod& pod, const std::optional<Namespace>& ns, const EnrollmentConfig& config = {},
                          bool enrolled_now = false) {
  return decide_enrollment(pod, ns ? &*ns : nullptr, config, enrolled_now);
}

TEST(Enrollment, PodLabelByNamespaceLabel) {
  for (const auto& row : kGrid) {
    EXPECT_EQ(decide(make_pod(row.pod_mode), make_ns(row.ns_mode, row.ns_known)), row.expected) << describe(row);
  }
}

TEST(Enrollment, ExclusionsWinOverEveryLabelCombination) {
  EnrollmentConfig excluding{{"kube-system", "shop"}};
  for (const auto& row : kGrid) {
    const auto ns = make_ns(row.ns_mode, row.ns_known);
    Pod host = make_pod(row.pod_mode);
    host.host_network = true;
    EXPECT_EQ(decide(host, ns), (EnrollmentDecision{false, R::kHostNetwork})) << describe(row);
    Pod sidecar = make_pod(row.pod_mode);
    sidecar.metadata.annotations = StringMap({{"sidecar.istio.io/status", "{\"containers\":[\"istio-proxy\"]}"}});
    EXPECT_EQ(decide(sidecar, ns), (EnrollmentDecision{false, R::kSidecar})) << describe(row);
    EXPECT_EQ(decide(make_pod(row.pod_mode), ns, excluding), (EnrollmentDecision{false, R::kExcludedNamespace}))
        << describe(row);
    for (const char* phase : {"Succeeded", "Failed"}) {
      Pod done = make_pod(row.pod_mode);
      done.phase = phase;
      EXPECT_EQ(decide(done, ns, {}, /*enrolled_now=*/true), (EnrollmentDecision{false, R::kTerminal}))
          << describe(row) << " " << phase;
    }
    for (const char* phase : {"Pending", "Running", "Unknown", ""}) {
      Pod live = make_pod(row.pod_mode);
      live.phase = phase;
      EXPECT_EQ(decide(live, ns), row.expected) << describe(row) << " " << phase;
    }
  }
}

TEST(Enrollment, ExcludedNamespaceIsOnlyTheNamedOnes) {
  EnrollmentConfig config{parse_namespace_list(" kube-system, ,istio-system,")};
  EXPECT_EQ(config.exclude_namespaces, (std::vector<std::string>{"kube-system", "istio-system"}));
  EXPECT_TRUE(decide(make_pod("ambient"), make_ns(nullptr, true), config).enroll);
  Pod in_kube_system = make_pod("ambient");
  in_kube_system.metadata.namespace_ = "kube-system";
  EXPECT_EQ(decide(in_kube_system, std::nullopt, config), (EnrollmentDecision{false, R::kExcludedNamespace}));
  EXPECT_TRUE(parse_namespace_list("").empty());
}

TEST(Enrollment, TerminatingPodKeepsItsStateUntilItEnds) {
  for (const auto& row : kGrid) {
    Pod pod = make_pod(row.pod_mode);
    pod.metadata.deletion_timestamp = std::chrono::sys_seconds(std::chrono::seconds(1767950000));
    const auto ns = make_ns(row.ns_mode, row.ns_known);
    const auto enrolled = decide(pod, ns, {}, true);
    const auto fresh = decide(pod, ns, {}, false);
    if (row.expected.enroll) {
      EXPECT_EQ(enrolled, (EnrollmentDecision{true, R::kTerminating})) << describe(row);
      EXPECT_EQ(fresh, (EnrollmentDecision{false, R::kTerminating})) << describe(row);
    } else {
      // A label change still releases a terminating pod.
      EXPECT_EQ(enrolled, row.expected) << describe(row);
      EXPECT_EQ(fresh, row.expected) << describe(row);
    }
  }
}

TEST(Enrollment, ReasonsReadForOperators) {
  EXPECT_EQ(to_string(R::kHostNetwork), "pod uses the host network");
  EXPECT_EQ(to_string(R::kExcludedNamespace), "namespace is excluded (EXCLUDE_NAMESPACES)");
}

std::shared_ptr<const Pod> other_pod(const char* name, const char* uid, std::vector<std::string> ips, const char* phase,
                                     bool host_network = false) {
  Pod p = make_pod("ambient");
  p.metadata.name = name;
  p.metadata.uid = uid;
  p.pod_ips = std::move(ips);
  p.phase = phase;
  p.host_network = host_network;
  return std::make_shared<const Pod>(std::move(p));
}

TEST(IpConflicts, TwoLivePodsClaimingOneIp) {
  Pod pod = make_pod("ambient");
  pod.pod_ips = {"10.0.0.5", "fd00::5"};
  const std::vector<std::shared_ptr<const Pod>> others{
      std::make_shared<const Pod>(pod),                                // itself (same uid)
      other_pod("job-1", "uid-job", {"10.0.0.5"}, "Succeeded"),        // finished Job: IP free for reuse
      other_pod("failed", "uid-failed", {"fd00::5"}, "Failed"),
      other_pod("node-agent", "uid-host", {"10.0.0.5"}, "Running", true),  // host network
      other_pod("api", "uid-api", {"10.0.0.9"}, "Running"),
  };
  EXPECT_FALSE(find_ip_conflict(pod, others).has_value());

  auto all = others;
  all.push_back(other_pod("squatter", "uid-squat", {"fd00::5"}, "Pending"));
  auto conflict = find_ip_conflict(pod, all);
  ASSERT_TRUE(conflict.has_value());
  EXPECT_EQ(conflict->ip, "fd00::5");
  EXPECT_EQ(conflict->other, "shop/squatter");
  EXPECT_EQ(conflict->other_uid, "uid-squat");

  Pod host = pod;
  host.host_network = true;
  EXPECT_FALSE(find_ip_conflict(host, all).has_value());
}

TEST(IpConflicts, IndexValuesAndLiveness) {
  Pod pod = make_pod("ambient");
  pod.pod_ips = {"10.0.0.5", "fd00::5"};
  EXPECT_EQ(pod_ip_index(pod), pod.pod_ips);
  pod.host_network = true;
  EXPECT_TRUE(pod_ip_index(pod).empty());
  pod.metadata.deletion_timestamp = std::chrono::sys_seconds(std::chrono::seconds(1));
  EXPECT_TRUE(is_live(pod));  // its sandbox still holds the IP during the grace period
  pod.phase = "Succeeded";
  EXPECT_FALSE(is_live(pod));
}

TEST(AnnotationFilter, KeepsOnlyWhatTheAgentReads) {
  Pod pod = make_pod("ambient");
  pod.metadata.annotations = StringMap({{"kubectl.kubernetes.io/last-applied-configuration", std::string(4096, 'x')},
                                        {"sidecar.istio.io/status", "{}"},
                                        {"ambient.istio.io/redirection", "enabled"},
                                        {"istio.io/reroute-virtual-interfaces", "eth1"},
                                        {"prometheus.io/scrape", "true"}});
  keep_agent_annotations(pod);
  std::vector<std::string> keys;
  for (const auto& [k, v] : pod.metadata.annotations.entries()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ambient.istio.io/redirection", "istio.io/reroute-virtual-interfaces",
                                            "sidecar.istio.io/status"}));
}

}  // namespace
}  // namespace meshnode::kube
