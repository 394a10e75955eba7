#include "state/snapshot.hpp"

#include <gtest/gtest.h>

#include "unit/state/fixture.hpp"

namespace meshnode::state {
namespace {

using base::Errc;
using test::ip;
using test::service;
using test::workload;

std::string build_error(std::vector<Workload> w, std::vector<Service> s = {},
                        std::vector<Authorization> p = {}) {
  auto r = StateSnapshot::build(std::move(w), std::move(s), std::move(p));
  if (r) return "built";
  EXPECT_EQ(r.error().code, Errc::kConfig);
  return r.error().context;
}

Authorization policy(std::string ns, std::string name, Authorization::Scope scope) {
  Authorization a;
  a.ns = std::move(ns);
  a.name = std::move(name);
  a.scope = scope;
  return a;
}

TEST(StateSnapshotBuild, RejectsDuplicateUid) {
  EXPECT_EQ(build_error({workload("w", "a", "sa", {"10.0.0.1"}), workload("w", "b", "sa", {"10.0.0.2"})}),
            "duplicate workload uid 'w'");
}

TEST(StateSnapshotBuild, RejectsEmptyUid) {
  EXPECT_EQ(build_error({workload("", "a", "sa", {"10.0.0.1"})}), "workload 'a/' has an empty uid");
}

TEST(StateSnapshotBuild, RejectsDuplicateAddressOnSameNetwork) {
  EXPECT_EQ(build_error({workload("w1", "a", "sa", {"10.0.0.1"}),
                         workload("w2", "a", "sa", {"10.0.0.9", "10.0.0.1"})}),
            "workloads 'w1' and 'w2' both have address /10.0.0.1");
}

TEST(StateSnapshotBuild, SameAddressOnDifferentNetworksIsFine) {
  auto w2 = workload("w2", "a", "sa", {"10.0.0.1"});
  w2.network = "net2";
  auto snapshot = StateSnapshot::build({workload("w1", "a", "sa", {"10.0.0.1"}), w2}, {}, {});
  ASSERT_TRUE(snapshot.has_value()) << snapshot.error().message();
  EXPECT_EQ((*snapshot)->workload_by_address("", ip("10.0.0.1"))->uid, "w1");
  EXPECT_EQ((*snapshot)->workload_by_address("net2", ip("10.0.0.1"))->uid, "w2");
  EXPECT_EQ((*snapshot)->workload_by_address("net3", ip("10.0.0.1")), nullptr);
}

TEST(StateSnapshotBuild, RejectsDuplicateServiceKey) {
  EXPECT_EQ(
      build_error({}, {service("ns", "web", {"10.96.0.1"}, {}), service("ns", "web", {"10.96.0.2"}, {})}),
      "duplicate service 'ns/web.ns.svc.cluster.local'");
}

TEST(StateSnapshotBuild, RejectsDuplicateVip) {
  EXPECT_EQ(build_error({}, {service("ns", "a", {"10.96.0.1"}, {}), service("ns", "b", {"10.96.0.1"}, {})}),
            "services 'ns/a.ns.svc.cluster.local' and 'ns/b.ns.svc.cluster.local' both have VIP /10.96.0.1");
}

TEST(StateSnapshotBuild, RejectsDuplicatePolicyKey) {
  auto p = policy("ns", "deny", Authorization::Scope::kNamespace);
  EXPECT_EQ(build_error({}, {}, {p, p}), "duplicate authorization policy 'ns/deny'");
}

TEST(StateSnapshot, IndexesEverything) {
  auto w1 = workload("w1", "ns", "sa", {"10.0.0.1"});
  w1.services["ns/web.ns.svc.cluster.local"] = {{80, 8080}};
  w1.services["ns/undeclared"] = {};
  auto w0 = workload("w0", "ns", "sa", {"10.0.0.2"});
  w0.services["ns/web.ns.svc.cluster.local"] = {};
  std::vector<Authorization> policies{policy("ns", "b", Authorization::Scope::kNamespace),
                                      policy("istio-system", "g", Authorization::Scope::kGlobal),
                                      policy("ns", "a", Authorization::Scope::kNamespace),
                                      policy("ns", "sel", Authorization::Scope::kWorkloadSelector)};
  auto built = StateSnapshot::build({w1, w0}, {service("ns", "web", {"10.96.0.1"}, {{80, 0}})}, policies);
  ASSERT_TRUE(built.has_value()) << built.error().message();
  const StateSnapshot& s = **built;

  EXPECT_EQ(s.workload_by_uid("w1")->ns, "ns");
  EXPECT_EQ(s.workload_by_uid("nope"), nullptr);
  EXPECT_EQ(s.service_by_key("ns/web.ns.svc.cluster.local")->name, "web");
  EXPECT_EQ(s.service_by_vip("", ip("10.96.0.1"))->name, "web");
  EXPECT_EQ(s.service_by_vip("", ip("10.96.0.2")), nullptr);
  EXPECT_EQ(s.policy_by_key("ns/sel")->scope, Authorization::Scope::kWorkloadSelector);

  auto eps = s.endpoints("ns/web.ns.svc.cluster.local");
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_EQ(eps[0].workload->uid, "w0");  // sorted by uid
  EXPECT_EQ(eps[1].workload->uid, "w1");
  EXPECT_EQ(std::vector<PortMapping>(eps[1].ports.begin(), eps[1].ports.end()), (std::vector<PortMapping>{{80, 8080}}));
  EXPECT_EQ(s.endpoints("ns/undeclared").size(), 1u);
  EXPECT_TRUE(s.endpoints("ns/none").empty());

  std::vector<std::string> keys;
  for (auto* p : s.policies_in_namespace("ns")) keys.push_back(p->key());
  EXPECT_EQ(keys, (std::vector<std::string>{"ns/a", "ns/b"}));
  ASSERT_EQ(s.policies_in_namespace("").size(), 1u);
  EXPECT_EQ(s.policies_in_namespace("")[0]->key(), "istio-system/g");

  std::vector<std::string> uids;
  for (const auto& [uid, w] : s.workloads()) uids.emplace_back(uid);
  EXPECT_EQ(uids, (std::vector<std::string>{"w0", "w1"}));
  EXPECT_EQ(s.policies().begin()->first, "istio-system/g");
}

TEST(StateSnapshot, EmptyHasNothing) {
  auto s = StateSnapshot::empty();
  EXPECT_TRUE(s->workloads().empty());
  EXPECT_EQ(s->service_by_vip("", ip("10.0.0.1")), nullptr);
}

TEST(Workload, IdentityDefaults) {
  Workload w;
  w.ns = "prod";
  w.service_account = "";
  w.trust_domain = "";
  EXPECT_EQ(w.identity().to_string(), "spiffe://cluster.local/ns/prod/sa/default");
  w.service_account = "api";
  w.trust_domain = "example.org";
  EXPECT_EQ(w.identity().to_string(), "spiffe://example.org/ns/prod/sa/api");
}

}  // namespace
}  // namespace meshnode::state
