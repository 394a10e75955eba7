#include "state/snapshot.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "unit/state/fixture.hpp"
#include "unit/state/snapshot_compare.hpp"

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

// Big builds (from 2,048 workloads) walk the workloads in memory order and put the results in uid
// order by rank. Here allocation order, input order and uid order are three different shuffles:
// the indexes must come out as from the same workloads handed over sorted by uid (the path that
// keeps the input order), and errors still name the right workloads.
base::IpAddr v4(std::uint32_t v) {
  return base::IpAddr::v4({static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
                           static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)});
}

TEST(StateSnapshotBuild, BigUnsortedBuildEqualsSortedBuild) {
  constexpr int kCount = 5000;
  std::mt19937 rng(12);
  std::vector<int> alloc_order(kCount);
  for (int i = 0; i < kCount; ++i) alloc_order[i] = i;
  std::shuffle(alloc_order.begin(), alloc_order.end(), rng);
  std::vector<std::shared_ptr<const Workload>> by_index(kCount);
  std::map<std::string, std::set<std::string>> members;  // service key → uids
  for (int i : alloc_order) {
    // Uids in an order unrelated to i; a shared prefix, as istiod's.
    int u = (i * 7919) % kCount;
    auto w = std::make_shared<Workload>(workload("Kubernetes//Pod/ns/pod-" + std::to_string(u), "ns", "sa", {}));
    w->addresses.push_back(v4(0x0a000000u + static_cast<std::uint32_t>(i)));
    if (i % 3 == 0) w->addresses.push_back(v4(0x0b000000u + static_cast<std::uint32_t>(i)));
    if (i % 5 == 0) w->network = "net2";
    for (int k : {i % 37, 37 + i % 11}) {
      std::string key = "ns/svc-" + std::to_string(k) + ".ns.svc.cluster.local";
      w->services.emplace(key, std::vector<PortMapping>{{80, static_cast<std::uint16_t>(8000 + i % 100)}});
      members[key].insert(w->uid);
    }
    by_index[i] = std::move(w);
  }
  std::vector<std::shared_ptr<const Workload>> input = by_index;
  std::shuffle(input.begin(), input.end(), rng);
  std::vector<std::shared_ptr<const Workload>> sorted = by_index;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a->uid < b->uid; });

  auto big = StateSnapshot::build(input, {}, {});
  ASSERT_TRUE(big.has_value()) << big.error().message();
  auto reference = StateSnapshot::build(sorted, {}, {});
  ASSERT_TRUE(reference.has_value()) << reference.error().message();
  test::expect_same_snapshot(**big, **reference);
  ASSERT_EQ((*big)->workloads().size(), static_cast<std::size_t>(kCount));
  std::string previous;
  for (const auto& [uid, w] : (*big)->workloads()) {
    EXPECT_LT(previous, uid);
    previous = std::string(uid);
  }
  for (const auto& [key, uids] : members) {
    auto got = test::endpoint_uids(**big, key);
    EXPECT_EQ(got, std::vector<std::string>(uids.begin(), uids.end())) << key;  // uid order
    for (const auto& e : (*big)->endpoints(key)) {
      ASSERT_EQ(e.ports.size(), 1u);
      EXPECT_EQ(e.ports[0].target_port, e.workload->services.at(key)[0].target_port);
    }
  }
  for (int i = 0; i < kCount; ++i) {
    const auto& w = by_index[i];
    for (const auto& ip : w->addresses) {
      auto owner = (*big)->workload_by_address(w->network, ip);
      ASSERT_NE(owner, nullptr) << ip.to_string();
      EXPECT_EQ(owner.get(), w.get()) << ip.to_string();
    }
  }

  // A duplicate uid and an address clash in a big unsorted input are still found and named.
  auto dup = input;
  dup.push_back(std::make_shared<Workload>(workload(by_index[4321]->uid, "other", "sa", {"10.200.0.1"})));
  std::shuffle(dup.begin(), dup.end(), rng);
  auto dup_result = StateSnapshot::build(dup, {}, {});
  ASSERT_FALSE(dup_result.has_value());
  EXPECT_EQ(dup_result.error().context, "duplicate workload uid '" + by_index[4321]->uid + "'");
  auto clash = input;
  clash.push_back(std::make_shared<Workload>(workload("Kubernetes//Pod/ns/zz-late", "ns", "sa", {"10.0.0.7"})));
  std::shuffle(clash.begin(), clash.end(), rng);
  auto clash_result = StateSnapshot::build(clash, {}, {});
  ASSERT_FALSE(clash_result.has_value());
  EXPECT_EQ(clash_result.error().context, "workloads '" + by_index[7]->uid +
                                               "' and 'Kubernetes//Pod/ns/zz-late' both have address /10.0.0.7");
}

}  // namespace
}  // namespace meshnode::state
