// ResourceStore::build() is incremental after the first build (issue #12): every delta must give
// exactly the snapshot a full rebuild gives, removals included, and bad resources in a delta must
// leave the snapshot as it was for them.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "unit/state/snapshot_compare.hpp"
#include "unit/xds/resources.hpp"
#include "xds/store.hpp"

namespace meshnode::xds {
namespace {

using namespace test;
using state::test::expect_same_snapshot;

std::string pod_ip(int i) { return "10.2." + std::to_string(i / 200) + "." + std::to_string(i % 200 + 1); }

istio::workload::Workload member(int i, std::string_view ip) {
  auto w = pod("ns" + std::to_string(i % 4), "pod-" + std::to_string(i), ip, "node-" + std::to_string(i % 3));
  auto& ports = (*w.mutable_services())["ns" + std::to_string(i % 4) + "/svc" + std::to_string(i % 10) + ".example"];
  auto* p = ports.add_ports();
  p->set_service_port(80);
  p->set_target_port(8080);
  return w;
}

istio::workload::Service svc(int s, std::string_view vip) {
  istio::workload::Service out = service("ns" + std::to_string(s % 4), "svc" + std::to_string(s), vip);
  out.set_hostname("svc" + std::to_string(s) + ".example");
  return out;
}

class IncrementalStore : public ::testing::Test {
 protected:
  void SetUp() override {
    config::LocalConfig local;
    local.workloads.push_back(local_workload("static", "10.9.0.1"));
    store_ = std::move(*ResourceStore::create(std::move(local)));
    ASSERT_TRUE(store_.build());  // as XdsClient::create does: the local-only initial snapshot
    auto resp = response(kAddressType);
    for (int i = 0; i < 600; ++i) add(resp, member(i, pod_ip(i)));
    for (int s = 0; s < 10; ++s) add(resp, svc(s, "10.96.1." + std::to_string(s + 1)));
    ASSERT_TRUE(store_.apply(resp).rejected.empty());
    auto policies = response(kAuthorizationType);
    add(policies, deny_port("ns1", "deny-1", 9000));
    ASSERT_TRUE(store_.apply(policies).rejected.empty());
    check();
  }

  // The incremental build must equal a full rebuild of the same store.
  std::shared_ptr<const state::StateSnapshot> check() {
    auto got = store_.build();
    EXPECT_TRUE(got) << got.error().message();
    auto want = store_.build_full_for_test();
    EXPECT_TRUE(want) << want.error().message();
    if (got && want) expect_same_snapshot(**got, **want);
    return got ? *got : nullptr;
  }

  ResourceStore store_ = *ResourceStore::create({});
};

TEST_F(IncrementalStore, AddUpdateAndRemoveMatchAFullRebuild) {
  auto before = check();
  auto resp = response(kAddressType);
  add(resp, member(1000, "10.3.0.1"));                // new pod
  add(resp, member(5, "10.3.0.5"), "2");              // existing pod, new IP
  resp.add_removed_resources(member(7, pod_ip(7)).uid());  // removed pod
  resp.add_removed_resources("ns1/svc1.example");     // removed service
  auto outcome = store_.apply(resp);
  EXPECT_EQ(outcome.upserted, 2u);
  EXPECT_EQ(outcome.removed, 2u);
  auto after = check();
  ASSERT_NE(after, nullptr);
  auto ip = [](std::string_view text) { return *base::IpAddr::parse(text); };
  EXPECT_EQ(after->workload_by_address("", ip("10.3.0.5"))->uid, "Kubernetes//Pod/ns1/pod-5");
  EXPECT_EQ(after->workload_by_address("", ip(pod_ip(5))), nullptr);
  EXPECT_EQ(after->workload_by_uid("Kubernetes//Pod/ns3/pod-7"), nullptr);
  EXPECT_EQ(after->service_by_key("ns1/svc1.example"), nullptr);
  EXPECT_NE(after->workload_by_uid("local//v1/Pod/default/static"), nullptr);
  // The previous snapshot still answers as it did (readers holding it are unaffected).
  EXPECT_NE(before->workload_by_address("", ip(pod_ip(5))), nullptr);
  EXPECT_NE(before->workload_by_uid("Kubernetes//Pod/ns3/pod-7"), nullptr);
  EXPECT_NE(before->service_by_key("ns1/svc1.example"), nullptr);
  // No change since: the same snapshot again.
  EXPECT_EQ(*store_.build(), after);
}

TEST_F(IncrementalStore, IpReuseShadowsTheOlderPodInTheIncrementalSnapshotToo) {
  auto resp = response(kAddressType);
  add(resp, member(2000, pod_ip(3)));  // a new pod takes pod-3's IP (pod churn)
  ASSERT_TRUE(store_.apply(resp).rejected.empty());
  auto snap = check();
  ASSERT_NE(snap, nullptr);
  EXPECT_EQ(snap->workload_by_address("", *base::IpAddr::parse(pod_ip(3)))->uid, "Kubernetes//Pod/ns0/pod-2000");
  EXPECT_TRUE(snap->workload_by_uid("Kubernetes//Pod/ns3/pod-3")->addresses.empty());
  auto gone = response(kAddressType);
  gone.add_removed_resources(member(2000, "").uid());
  ASSERT_EQ(store_.apply(gone).removed, 1u);
  check();
}

TEST_F(IncrementalStore, BadResourcesInADeltaLeaveTheSnapshotAsItWas) {
  auto before = check();
  auto resp = response(kAddressType);
  auto bad = member(9, pod_ip(9));
  bad.set_addresses(0, "xyz");                               // undecodable address
  add(resp, bad, "2");
  add(resp, member(3000, pod_ip(10)), "1", member(10, "").uid());  // resource pod-10 gets a new uid
  auto clash_vip = svc(99, "10.96.1.1");  // svc0's VIP: the newest claim wins
  add(resp, clash_vip);
  add(resp, member(3001, "10.9.0.1"));                       // the local workload's IP
  add(resp, member(3002, "10.4.0.2"));                       // good
  auto* garbage = resp.add_resources();
  garbage->set_name("garbage");
  garbage->mutable_resource()->set_type_url(std::string(kAddressType));
  garbage->mutable_resource()->set_value("\xff\xff\xff");
  auto outcome = store_.apply(resp);
  EXPECT_EQ(outcome.rejected.size(), 3u) << outcome.error_message();
  auto after = check();
  ASSERT_NE(after, nullptr);
  // The rejected update kept the old version of pod-9.
  EXPECT_EQ(*after->workload_by_uid(bad.uid()), *before->workload_by_uid(bad.uid()));
  EXPECT_NE(after->workload_by_address("", *base::IpAddr::parse("10.4.0.2")), nullptr);
  EXPECT_EQ(after->workload_by_address("", *base::IpAddr::parse("10.9.0.1"))->uid, "local//v1/Pod/default/static");
}

TEST_F(IncrementalStore, PolicyChangesAndBigBatchesMatchAFullRebuild) {
  auto policies = response(kAuthorizationType);
  add(policies, deny_port("ns2", "deny-2", 9001));
  policies.add_removed_resources("ns1/deny-1");
  ASSERT_TRUE(store_.apply(policies).rejected.empty());
  auto snap = check();
  ASSERT_NE(snap, nullptr);
  EXPECT_EQ(snap->policy_by_key("ns1/deny-1"), nullptr);
  EXPECT_NE(snap->policy_by_key("ns2/deny-2"), nullptr);
  // A resync-sized batch (more than an eighth of the store) takes the from-scratch path.
  auto resp = response(kAddressType);
  for (int i = 0; i < 300; ++i) add(resp, member(i, pod_ip(i + 1000)), "3");
  for (int i = 300; i < 400; ++i) resp.add_removed_resources(member(i, "").uid());
  ASSERT_TRUE(store_.apply(resp).rejected.empty());
  check();
  auto small = response(kAddressType);
  add(small, member(401, "10.5.0.1"), "4");
  ASSERT_TRUE(store_.apply(small).rejected.empty());
  check();
}

// The (network, IP) owner index under churn: 200 pods drawing one or two IPs from a pool of 48,
// so claims collide, move and are released all the time. Checked against a model of the rule
// (the newest claim wins; a released claim leaves the IP unowned) through knows() and the
// snapshot's address lookup, and each incremental build against a full rebuild.
TEST(StoreAddressOwners, NewestClaimWinsUnderChurn) {
  auto store = std::move(*ResourceStore::create({}));
  std::map<std::string, std::vector<std::string>> held;  // uid → IPs
  std::map<std::string, std::string> owner;              // IP → uid
  std::mt19937 rng(12);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto pool_ip = [](int k) { return "10.7." + std::to_string(k / 16) + "." + std::to_string(k % 16 + 1); };
  auto release = [&](const std::string& uid) {
    for (const auto& ip : held[uid]) {
      if (auto it = owner.find(ip); it != owner.end() && it->second == uid) owner.erase(it);
    }
    held.erase(uid);
  };
  for (int round = 0; round < 60; ++round) {
    auto resp = response(kAddressType);
    std::vector<std::string> removed;
    for (int r = pick(4); r > 0 && !held.empty(); --r) {
      auto it = std::next(held.begin(), pick(static_cast<int>(held.size())));
      resp.add_removed_resources(it->first);
      removed.push_back(it->first);
    }
    for (const auto& uid : removed) {
      if (held.contains(uid)) release(uid);
    }
    // Big first rounds take the from-scratch path, small later ones the incremental one.
    int puts = round < 3 ? 80 : 1 + pick(12);
    for (int k = 0; k < puts; ++k) {
      auto w = pod("churn", "pod-" + std::to_string(pick(200)), pool_ip(pick(48)));
      if (pick(3) == 0) w.add_addresses(ip4(pool_ip(pick(48))));
      std::vector<std::string> ips;
      for (const auto& raw : w.addresses()) ips.push_back(base::IpAddr::from_bytes(raw)->to_string());
      add(resp, w, std::to_string(round));
      release(w.uid());
      held[w.uid()] = ips;
      for (const auto& ip : ips) owner[ip] = w.uid();
    }
    auto outcome = store.apply(resp);
    ASSERT_TRUE(outcome.rejected.empty()) << outcome.error_message();
    auto got = store.build();
    ASSERT_TRUE(got) << got.error().message();
    auto want = store.build_full_for_test();
    ASSERT_TRUE(want) << want.error().message();
    state::test::expect_same_snapshot(**got, **want);
    for (int k = 0; k < 48; ++k) {
      std::string ip = pool_ip(k);
      auto it = owner.find(ip);
      EXPECT_EQ(store.knows("/" + ip), it != owner.end()) << "round " << round << " ip " << ip;
      auto w = (*got)->workload_by_address("", *base::IpAddr::parse(ip));
      if (it == owner.end()) {
        EXPECT_EQ(w, nullptr) << "round " << round << " ip " << ip;
      } else {
        ASSERT_NE(w, nullptr) << "round " << round << " ip " << ip;
        EXPECT_EQ(w->uid, it->second) << "round " << round << " ip " << ip;
      }
    }
    EXPECT_EQ(store.workload_count(), held.size());
  }
}

}  // namespace
}  // namespace meshnode::xds
