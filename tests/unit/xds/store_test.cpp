#include "xds/store.hpp"

#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>

#include "unit/xds/resources.hpp"

namespace meshnode::xds {
namespace {

using namespace test;

ResourceStore empty_store() { return *ResourceStore::create({}); }

TEST(ResourceStore, AppliesWorkloadsServicesAndPolicies) {
  auto store = empty_store();
  auto resp = response(kAddressType);
  auto w = pod("default", "web-1", "10.0.0.5");
  (*w.mutable_services())["default/web.default.svc.cluster.local"].add_ports()->set_service_port(80);
  add(resp, w);
  add(resp, service("default", "web", "10.96.0.10"));
  auto outcome = store.apply(resp);
  EXPECT_TRUE(outcome.rejected.empty()) << outcome.error_message();
  EXPECT_EQ(outcome.upserted, 2u);

  auto policies = response(kAuthorizationType);
  add(policies, deny_port("default", "no-9999", 9999));
  EXPECT_EQ(store.apply(policies).upserted, 1u);

  auto snapshot = store.build();
  ASSERT_TRUE(snapshot) << snapshot.error().message();
  auto got = (*snapshot)->workload_by_address("", *base::IpAddr::parse("10.0.0.5"));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->identity().to_string(), "spiffe://cluster.local/ns/default/sa/web-1-sa");
  EXPECT_EQ(got->protocol, state::TunnelProtocol::kHbone);
  // target_port 0 on a workload's service port means "the service port".
  EXPECT_EQ(got->services.at("default/web.default.svc.cluster.local").at(0).target_port, 80);
  ASSERT_NE((*snapshot)->service_by_vip("", *base::IpAddr::parse("10.96.0.10")), nullptr);
  EXPECT_EQ((*snapshot)->endpoints("default/web.default.svc.cluster.local").size(), 1u);
  const auto* policy = (*snapshot)->policy_by_key("default/no-9999");
  ASSERT_NE(policy, nullptr);
  EXPECT_EQ(policy->action, state::Authorization::Action::kDeny);
  EXPECT_EQ(policy->rules.at(0).clauses.at(0).matches.at(0).destination_ports.at(0), 9999);
}

TEST(ResourceStore, RejectsBadResourcesByNameAndAppliesTheRest) {
  auto store = empty_store();
  auto resp = response(kAddressType);
  add(resp, pod("default", "good", "10.0.0.1"));
  auto bad_ip = pod("default", "bad-ip", "10.0.0.2");
  bad_ip.set_addresses(0, "abc");
  add(resp, bad_ip);
  auto legacy = pod("default", "legacy", "10.0.0.3");
  legacy.set_tunnel_protocol(istio::workload::LEGACY_ISTIO_MTLS);
  add(resp, legacy);
  auto* garbage = resp.add_resources();
  garbage->set_name("garbage");
  garbage->mutable_resource()->set_type_url(std::string(kAddressType));
  garbage->mutable_resource()->set_value("\xff\xff\xff");
  auto* wrong_type = resp.add_resources();
  wrong_type->set_name("wrong-type");
  wrong_type->mutable_resource()->PackFrom(deny_port("default", "x", 1));

  auto outcome = store.apply(resp);
  EXPECT_EQ(outcome.upserted, 1u);
  ASSERT_EQ(outcome.rejected.size(), 4u);
  EXPECT_EQ(outcome.rejected[0].name, "Kubernetes//Pod/default/bad-ip");
  EXPECT_EQ(outcome.rejected[0].reason, "addresses[0] has 3 bytes (expected 4 or 16)");
  EXPECT_EQ(outcome.rejected[1].name, "Kubernetes//Pod/default/legacy");
  EXPECT_EQ(outcome.rejected[2].name, "garbage");
  EXPECT_EQ(outcome.rejected[3].name, "wrong-type");
  EXPECT_NE(outcome.error_message().find("Kubernetes//Pod/default/bad-ip: addresses[0]"), std::string::npos);

  auto versions = store.versions(kAddressType);
  EXPECT_EQ(versions.size(), 1u) << "rejected names must not be recorded";
  EXPECT_TRUE(versions.contains("Kubernetes//Pod/default/good"));
  auto snapshot = store.build();
  ASSERT_TRUE(snapshot);
  EXPECT_EQ((*snapshot)->workloads().size(), 1u);
}

TEST(ResourceStore, ToleratesUnknownFieldsAndDescriptiveUnknownEnums) {
  auto store = empty_store();
  auto w = pod("default", "future", "10.0.0.9");
  auto* unknown = w.GetReflection()->MutableUnknownFields(&w);
  unknown->AddVarint(999, 7);  // a field a newer istiod adds
  unknown->AddVarint(12, 42);  // workload_type = 42 (unknown enum value)
  unknown->AddVarint(17, 9);   // status = 9
  auto resp = response(kAddressType);
  add(resp, w);
  auto s = service("default", "svc", "10.96.0.1");
  s.GetReflection()->MutableUnknownFields(&s)->AddVarint(9, 77);  // ip_families = 77
  add(resp, s);
  auto outcome = store.apply(resp);
  EXPECT_TRUE(outcome.rejected.empty()) << outcome.error_message();
  auto snapshot = store.build();
  ASSERT_TRUE(snapshot);
  auto got = (*snapshot)->workload_by_uid("Kubernetes//Pod/default/future");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->workload_type, "deployment");
  EXPECT_TRUE(got->healthy);
  EXPECT_EQ((*snapshot)->service_by_key("default/svc.default.svc.cluster.local")->ip_families,
            state::IpFamilies::kAutomatic);
}

TEST(ResourceStore, ConvertsLoadBalancingAndSkipsUnknownScopes) {
  auto store = empty_store();
  auto s = service("default", "lb", "10.96.0.2");
  auto* lb = s.mutable_load_balancing();
  lb->add_routing_preference(istio::workload::LoadBalancing::ZONE);
  lb->GetReflection()->MutableUnknownFields(lb)->AddVarint(1, 99);  // a scope from a newer istiod
  lb->add_routing_preference(istio::workload::LoadBalancing::NETWORK);
  lb->set_mode(istio::workload::LoadBalancing::FAILOVER);
  lb->set_health_policy(istio::workload::LoadBalancing::ALLOW_ALL);
  auto other = service("default", "lb2", "10.96.0.3");
  other.mutable_load_balancing()
      ->GetReflection()
      ->MutableUnknownFields(other.mutable_load_balancing())
      ->AddVarint(2, 9);
  auto resp = response(kAddressType);
  add(resp, s);
  add(resp, other);
  ASSERT_TRUE(store.apply(resp).rejected.empty());
  auto snapshot = *store.build();
  const auto& got = snapshot->service_by_key("default/lb.default.svc.cluster.local")->load_balancing;
  // Unpacked repeated enums keep their wire order; the unknown 99 is dropped wherever it sits.
  EXPECT_EQ(got.routing_preferences.size(), 2u);
  EXPECT_EQ(got.mode, state::LoadBalancingMode::kFailover);
  EXPECT_EQ(got.health_policy, state::HealthPolicy::kAllowAll);
  EXPECT_EQ(snapshot->service_by_key("default/lb2.default.svc.cluster.local")->load_balancing.mode,
            state::LoadBalancingMode::kStandard);
}

TEST(ResourceStore, RejectsUnknownSecurityEnums) {
  auto store = empty_store();
  auto policy = deny_port("default", "future-action", 80);
  policy.GetReflection()->MutableUnknownFields(&policy)->AddVarint(4, 5);
  policy.clear_action();
  auto resp = response(kAuthorizationType);
  add(resp, policy);
  auto outcome = store.apply(resp);
  ASSERT_EQ(outcome.rejected.size(), 1u);
  EXPECT_EQ(outcome.rejected[0].name, "default/future-action");
  EXPECT_EQ(outcome.rejected[0].reason, "unknown action 5");
}

TEST(ResourceStore, RemovalsAndReplacement) {
  auto store = empty_store();
  auto resp = response(kAddressType);
  add(resp, pod("default", "a", "10.0.0.1"));
  add(resp, pod("default", "b", "10.0.0.2"));
  ASSERT_EQ(store.apply(resp).upserted, 2u);

  auto next = response(kAddressType, "n2");
  next.add_removed_resources("Kubernetes//Pod/default/a");
  next.add_removed_resources("never-held");
  add(next, pod("default", "b", "10.0.0.3"), "2");
  auto outcome = store.apply(next);
  EXPECT_EQ(outcome.removed, 1u);
  EXPECT_EQ(outcome.upserted, 1u);
  auto snapshot = *store.build();
  EXPECT_EQ(snapshot->workload_by_uid("Kubernetes//Pod/default/a"), nullptr);
  EXPECT_EQ(snapshot->workload_by_address("", *base::IpAddr::parse("10.0.0.2")), nullptr);
  EXPECT_NE(snapshot->workload_by_address("", *base::IpAddr::parse("10.0.0.3")), nullptr);
  EXPECT_EQ(store.versions(kAddressType).at("Kubernetes//Pod/default/b"), "2");
}

TEST(ResourceStore, NewestClaimOnAnAddressWins) {
  auto store = empty_store();
  auto first = response(kAddressType);
  add(first, pod("default", "old", "10.0.0.7"));
  ASSERT_TRUE(store.apply(first).rejected.empty());
  auto second = response(kAddressType, "n2");
  add(second, pod("default", "new", "10.0.0.7"));
  auto outcome = store.apply(second);
  EXPECT_TRUE(outcome.rejected.empty()) << outcome.error_message();
  auto snapshot = store.build();
  ASSERT_TRUE(snapshot) << snapshot.error().message();
  EXPECT_EQ((*snapshot)->workload_by_address("", *base::IpAddr::parse("10.0.0.7"))->name, "new");
  // The older workload is still known by uid, without the address it lost.
  auto old = (*snapshot)->workload_by_uid("Kubernetes//Pod/default/old");
  ASSERT_NE(old, nullptr);
  EXPECT_TRUE(old->addresses.empty());
  EXPECT_TRUE(store.knows("/10.0.0.7"));
  EXPECT_FALSE(store.knows("/10.0.0.8"));
}

TEST(ResourceStore, LocalConfigWinsOverXds) {
  config::LocalConfig local;
  local.workloads.push_back(local_workload("static", "10.1.0.1"));
  auto store = *ResourceStore::create(std::move(local));
  auto resp = response(kAddressType);
  add(resp, pod("default", "clash", "10.1.0.1"));
  add(resp, pod("default", "fine", "10.1.0.2"));
  auto outcome = store.apply(resp);
  ASSERT_EQ(outcome.rejected.size(), 1u);
  EXPECT_EQ(outcome.rejected[0].reason, "address /10.1.0.1 belongs to a local workload");
  auto snapshot = *store.build();
  EXPECT_EQ(snapshot->workloads().size(), 2u);
  EXPECT_EQ(snapshot->workload_by_address("", *base::IpAddr::parse("10.1.0.1"))->name, "static");
}

TEST(ResourceStore, OneUidUnderTwoResourceNamesIsRejected) {
  auto store = empty_store();
  auto resp = response(kAddressType);
  add(resp, pod("default", "web", "10.0.0.1"));                       // named by its uid
  add(resp, pod("default", "web", "10.0.0.2"), "1", "another-name");  // same uid, other name
  auto outcome = store.apply(resp);
  ASSERT_EQ(outcome.rejected.size(), 1u);
  EXPECT_EQ(outcome.rejected[0].name, "another-name");
  EXPECT_EQ(outcome.rejected[0].reason,
            "uid 'Kubernetes//Pod/default/web' is already held by resource 'Kubernetes//Pod/default/web'");
  // And the other way round: a name that is not the uid first.
  auto other = empty_store();
  auto first = response(kAddressType);
  add(first, pod("default", "db", "10.0.0.3"), "1", "db-alias");
  add(first, pod("default", "db", "10.0.0.4"));
  auto o2 = other.apply(first);
  ASSERT_EQ(o2.rejected.size(), 1u);
  EXPECT_EQ(o2.rejected[0].name, "Kubernetes//Pod/default/db");
  EXPECT_TRUE(other.knows("Kubernetes//Pod/default/db"));
  auto removal = response(kAddressType, "n2");
  removal.add_removed_resources("db-alias");
  EXPECT_EQ(other.apply(removal).removed, 1u);
  EXPECT_FALSE(other.knows("Kubernetes//Pod/default/db"));
  EXPECT_EQ(other.workload_count(), 0u);
}

TEST(ResourceStore, AResourceThatChangesItsUidReleasesTheOldOne) {
  auto store = empty_store();
  const std::string x = "Kubernetes//Pod/default/x", y = "Kubernetes//Pod/default/y",
                    z = "Kubernetes//Pod/default/z";
  // "alias" (name != uid) moves from uid y to uid x: y is free for another resource.
  auto r1 = response(kAddressType);
  add(r1, pod("default", "y", "10.0.0.1"), "1", "alias");
  ASSERT_TRUE(store.apply(r1).rejected.empty());
  auto r2 = response(kAddressType, "n2");
  add(r2, pod("default", "x", "10.0.0.2"), "2", "alias");
  ASSERT_TRUE(store.apply(r2).rejected.empty());
  EXPECT_FALSE(store.knows(y));
  EXPECT_TRUE(store.knows(x));
  EXPECT_EQ(store.versions(kAddressType).at("alias"), "2");
  auto r3 = response(kAddressType, "n3");
  add(r3, pod("default", "y", "10.0.0.3"), "1", "other");
  auto o3 = store.apply(r3);
  EXPECT_TRUE(o3.rejected.empty()) << o3.error_message();
  // Resource x, named by its uid, may exist once "alias" has left uid x.
  auto r4 = response(kAddressType, "n4");
  r4.add_removed_resources("alias");
  add(r4, pod("default", "x", "10.0.0.4"));
  auto o4 = store.apply(r4);
  EXPECT_EQ(o4.removed, 1u);
  EXPECT_TRUE(o4.rejected.empty()) << o4.error_message();
  // Resource x: name == uid -> uid z (name != uid) -> back to uid x; z is released.
  auto r5 = response(kAddressType, "n5");
  add(r5, pod("default", "z", "10.0.0.5"), "2", x);
  ASSERT_TRUE(store.apply(r5).rejected.empty());
  EXPECT_TRUE(store.knows(z));
  auto r6 = response(kAddressType, "n6");
  add(r6, pod("default", "x", "10.0.0.6"), "3");
  auto o6 = store.apply(r6);
  EXPECT_TRUE(o6.rejected.empty()) << o6.error_message();
  EXPECT_FALSE(store.knows(z));
  EXPECT_EQ(store.versions(kAddressType).at(x), "3");
  auto snapshot = store.build();
  ASSERT_TRUE(snapshot);
  EXPECT_EQ((*snapshot)->workload_by_uid(z), nullptr);
  ASSERT_NE((*snapshot)->workload_by_uid(x), nullptr);
  EXPECT_EQ((*snapshot)->workload_by_uid(x)->addresses, std::vector{*base::IpAddr::parse("10.0.0.6")});
  auto r7 = response(kAddressType, "n7");
  r7.add_removed_resources(x);
  r7.add_removed_resources("other");
  EXPECT_EQ(store.apply(r7).removed, 2u);
  EXPECT_EQ(store.workload_count(), 0u);
  EXPECT_FALSE(store.knows(x));
  EXPECT_FALSE(store.knows(y));
}

// A response big enough to be decoded on helper threads (which hash the names for the indexing
// pass), half of it named by uid and half not: every resource is found by name and by uid, and
// all of them leave.
TEST(ResourceStore, ABigResponseMixingUidNamesAndOtherNamesIndexesEveryResource) {
  constexpr int kPods = 20000;
  auto store = empty_store();
  auto name_of = [](int i) {
    return i % 2 ? "alias-" + std::to_string(i) : "Kubernetes//Pod/default/p" + std::to_string(i);
  };
  auto ip_of = [](int i) { return "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1); };
  auto resp = response(kAddressType);
  for (int i = 0; i < kPods; ++i) add(resp, pod("default", "p" + std::to_string(i), ip_of(i)), "1", name_of(i));
  auto outcome = store.apply(resp);
  ASSERT_TRUE(outcome.rejected.empty()) << outcome.error_message();
  EXPECT_EQ(store.workload_count(), std::size_t{kPods});
  for (int i = 0; i < kPods; ++i) {
    ASSERT_TRUE(store.knows(name_of(i))) << name_of(i);
    ASSERT_TRUE(store.knows("Kubernetes//Pod/default/p" + std::to_string(i))) << i;
    ASSERT_TRUE(store.knows("/" + ip_of(i))) << ip_of(i);
  }
  auto removal = response(kAddressType, "n2");
  for (int i = 0; i < kPods; ++i) removal.add_removed_resources(name_of(i));
  EXPECT_EQ(store.apply(removal).removed, std::size_t{kPods});
  EXPECT_EQ(store.workload_count(), 0u);
  for (int i = 0; i < kPods; i += 97) EXPECT_FALSE(store.knows("Kubernetes//Pod/default/p" + std::to_string(i)));
}

TEST(ResourceStore, UnknownTypeUrlAppliesNothing) {
  auto store = empty_store();
  auto resp = response("type.googleapis.com/envoy.config.cluster.v3.Cluster");
  EXPECT_TRUE(store.apply(resp).unknown_type);
}

}  // namespace
}  // namespace meshnode::xds
