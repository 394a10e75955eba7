// Incremental snapshots (issue #12): StateSnapshot::apply() on a copy-on-write base must give the
// same snapshot as a full build, share what it does not touch, and never publish a half-applied
// delta.

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "state/cow_map.hpp"
#include "state/snapshot.hpp"
#include "unit/state/fixture.hpp"
#include "unit/state/snapshot_compare.hpp"

namespace meshnode::state {
namespace {

using base::Errc;
using test::expect_same_snapshot;
using test::ip;

TEST(CowMap, AppliesSortedChangesAndSharesUntouchedChunks) {
  using Map = CowMap<int, int, std::less<>, 8>;
  Map map;
  std::vector<Map::Change> all;
  for (int i = 0; i < 1000; ++i) all.emplace_back(i * 2, i);
  map.apply(all);
  ASSERT_EQ(map.size(), 1000u);
  EXPECT_GT(map.chunk_count(), 50u);
  ASSERT_NE(map.find(500), nullptr);
  EXPECT_EQ(map.find(500)->second, 250);
  EXPECT_EQ(map.find(501), nullptr);
  EXPECT_EQ(map.find(-1), nullptr);
  EXPECT_EQ(map.find(5000), nullptr);

  Map next = map;
  std::vector<Map::Change> delta;
  delta.emplace_back(-5, 1);             // below everything
  delta.emplace_back(501, 7);            // insert in the middle
  delta.emplace_back(502, std::nullopt);  // erase
  delta.emplace_back(777, std::nullopt);  // erase of an absent key: no-op
  delta.emplace_back(1998, 99);          // replace the last
  next.apply(delta);
  EXPECT_EQ(next.size(), 1001u);
  EXPECT_EQ(next.find(501)->second, 7);
  EXPECT_EQ(next.find(502), nullptr);
  EXPECT_EQ(next.find(1998)->second, 99);
  EXPECT_EQ(next.find(-5)->second, 1);
  // The base is unchanged and most chunks are shared.
  EXPECT_EQ(map.size(), 1000u);
  EXPECT_NE(map.find(502), nullptr);
  EXPECT_EQ(map.find(1998)->second, 999);
  std::size_t shared = 0;
  for (std::size_t i = 0; i < next.chunk_count(); ++i) {
    for (std::size_t j = 0; j < map.chunk_count(); ++j) shared += next.shares_chunk_for_test(map, i, j) ? 1 : 0;
  }
  EXPECT_EQ(shared, map.chunk_count() - 4);  // the four chunks the changes fell into
  // Iteration is sorted and complete.
  int prev = -100;
  std::size_t n = 0;
  for (const auto& [k, v] : next) {
    EXPECT_LT(prev, k);
    prev = k;
    ++n;
  }
  EXPECT_EQ(n, next.size());
  // Erasing everything leaves an empty map.
  std::vector<Map::Change> none;
  for (const auto& [k, v] : next) none.emplace_back(k, std::nullopt);
  next.apply(none);
  EXPECT_TRUE(next.empty());
  EXPECT_EQ(next.begin(), next.end());
}

// A random but reproducible population: workloads in a few services, services with VIPs.
struct Population {
  std::mt19937 rng{12345};
  std::map<std::string, Workload> workloads;
  std::map<std::string, Service> services;

  std::string service_key(int s) { return "ns" + std::to_string(s % 3) + "/svc" + std::to_string(s) + ".example"; }

  Workload make_workload(int i, int generation) {
    Workload w = test::workload("uid-" + std::to_string(i), "ns" + std::to_string(i % 3), "sa", {});
    w.addresses.push_back(ip("10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250)));
    if (i % 7 == 0) w.addresses.push_back(ip("fd00::" + std::to_string(i + 1)));
    w.canonical_revision = "v" + std::to_string(generation);
    int s = static_cast<int>(rng() % 20);
    w.services[service_key(s)] = {{80, static_cast<std::uint16_t>(8000 + generation)}};
    if (rng() % 4 == 0) w.services[service_key((s + 1) % 20)] = {};
    return w;
  }

  Service make_service(int s, int generation) {
    Service svc;
    svc.name = "svc" + std::to_string(s);
    svc.ns = "ns" + std::to_string(s % 3);
    svc.hostname = "svc" + std::to_string(s) + ".example";
    svc.vips.push_back({"", ip("10.96.0." + std::to_string(s + 1 + 40 * (generation % 2)))});
    svc.ports = {{80, 0}};
    return svc;
  }

  Result<std::shared_ptr<const StateSnapshot>> full() const {
    std::vector<Workload> w;
    for (const auto& [uid, wl] : workloads) w.push_back(wl);
    std::vector<Service> s;
    for (const auto& [key, svc] : services) s.push_back(svc);
    return StateSnapshot::build(std::move(w), std::move(s), {});
  }
};

TEST(StateSnapshotApply, RandomDeltasMatchAFullBuild) {
  Population pop;
  for (int i = 0; i < 2000; ++i) {
    Workload w = pop.make_workload(i, 0);
    pop.workloads[w.uid] = w;
  }
  for (int s = 0; s < 20; ++s) pop.services[pop.make_service(s, 0).key()] = pop.make_service(s, 0);
  auto current = pop.full();
  ASSERT_TRUE(current) << current.error().message();
  for (int round = 1; round <= 40; ++round) {
    StateDelta delta;
    int changes = 1 + static_cast<int>(pop.rng() % (round % 10 == 0 ? 400 : 5));
    std::set<std::string> seen;
    for (int c = 0; c < changes; ++c) {
      int i = static_cast<int>(pop.rng() % 2300);  // some new, most existing
      std::string uid = "uid-" + std::to_string(i);
      if (!seen.insert(uid).second) continue;
      if (pop.rng() % 3 == 0) {
        delta.removed_workloads.push_back(uid);
        pop.workloads.erase(uid);
      } else {
        Workload w = pop.make_workload(i, round);
        pop.workloads[uid] = w;
        delta.workloads.push_back(std::make_shared<const Workload>(std::move(w)));
      }
    }
    if (round % 5 == 0) {
      int s = static_cast<int>(pop.rng() % 20);
      if (round % 15 == 0) {
        delta.removed_services.push_back(pop.service_key(s));
        pop.services.erase(pop.service_key(s));
      } else {
        Service svc = pop.make_service(s, round);
        pop.services[svc.key()] = svc;
        delta.services.push_back(std::move(svc));
      }
    }
    auto next = (*current)->apply(std::move(delta));
    ASSERT_TRUE(next) << "round " << round << ": " << next.error().message();
    auto want = pop.full();
    ASSERT_TRUE(want);
    SCOPED_TRACE("round " + std::to_string(round));
    expect_same_snapshot(**next, **want);
    current = next;
  }
}

TEST(StateSnapshotApply, RemovalsDropAddressesEndpointsAndVips) {
  auto web = test::service("ns", "web", {"10.96.0.1"}, {{80, 0}});
  auto a = test::workload("a", "ns", "sa", {"10.0.0.1"});
  a.services[web.key()] = {{80, 8080}};
  auto b = test::workload("b", "ns", "sa", {"10.0.0.2"});
  b.services[web.key()] = {{80, 8080}};
  auto base = StateSnapshot::build({a, b}, {web}, {});
  ASSERT_TRUE(base);
  StateDelta delta;
  delta.removed_workloads = {"a", "not-there"};
  auto next = (*base)->apply(std::move(delta));
  ASSERT_TRUE(next) << next.error().message();
  EXPECT_EQ((*next)->workload_by_uid("a"), nullptr);
  EXPECT_EQ((*next)->workload_by_address("", ip("10.0.0.1")), nullptr);
  EXPECT_EQ(test::endpoint_uids(**next, web.key()), std::vector<std::string>{"b"});
  // The base still answers as before: readers holding it are unaffected.
  EXPECT_NE((*base)->workload_by_address("", ip("10.0.0.1")), nullptr);
  EXPECT_EQ((*base)->endpoints(web.key()).size(), 2u);

  StateDelta drop;
  drop.removed_services = {web.key()};
  drop.removed_workloads = {"b"};
  auto empty = (*next)->apply(std::move(drop));
  ASSERT_TRUE(empty);
  EXPECT_EQ((*empty)->service_by_vip("", ip("10.96.0.1")), nullptr);
  EXPECT_EQ((*empty)->service_by_key(web.key()), nullptr);
  EXPECT_TRUE((*empty)->endpoints(web.key()).empty());
  EXPECT_TRUE((*empty)->workloads().empty());
}

TEST(StateSnapshotApply, AClashWithAnUnchangedEntryFailsAndPublishesNothing) {
  auto base = StateSnapshot::build({test::workload("a", "ns", "sa", {"10.0.0.1"})},
                                   {test::service("ns", "web", {"10.96.0.1"}, {})}, {});
  ASSERT_TRUE(base);
  StateDelta delta;
  delta.workloads.push_back(std::make_shared<const Workload>(test::workload("b", "ns", "sa", {"10.0.0.1"})));
  auto clash = (*base)->apply(std::move(delta));
  ASSERT_FALSE(clash);
  EXPECT_EQ(clash.error().code, Errc::kConfig);
  EXPECT_EQ(clash.error().context, "workloads 'a' and 'b' both have address /10.0.0.1");

  StateDelta vip;
  vip.services.push_back(test::service("ns", "api", {"10.96.0.1"}, {}));
  auto vip_clash = (*base)->apply(std::move(vip));
  ASSERT_FALSE(vip_clash);
  EXPECT_EQ(vip_clash.error().context,
            "services 'ns/api.ns.svc.cluster.local' and 'ns/web.ns.svc.cluster.local' both have VIP /10.96.0.1");

  // Moving an address from one workload to another in one delta is fine.
  StateDelta move;
  move.removed_workloads = {"a"};
  move.workloads.push_back(std::make_shared<const Workload>(test::workload("b", "ns", "sa", {"10.0.0.1"})));
  auto moved = (*base)->apply(std::move(move));
  ASSERT_TRUE(moved) << moved.error().message();
  EXPECT_EQ((*moved)->workload_by_address("", ip("10.0.0.1"))->uid, "b");
}

TEST(StateSnapshotApply, PoliciesAreSharedUntilReplaced) {
  Authorization global;
  global.ns = "istio-system";
  global.name = "g";
  global.scope = Authorization::Scope::kGlobal;
  auto base = StateSnapshot::build(std::vector<Workload>{}, {}, {global});
  ASSERT_TRUE(base);
  StateDelta delta;
  delta.workloads.push_back(std::make_shared<const Workload>(test::workload("a", "ns", "sa", {"10.0.0.1"})));
  auto next = (*base)->apply(std::move(delta));
  ASSERT_TRUE(next);
  EXPECT_EQ(&(*next)->policies(), &(*base)->policies());
  ASSERT_EQ((*next)->global_policies().size(), 1u);
  StateDelta replace;
  replace.policies.emplace();
  auto cleared = (*next)->apply(std::move(replace));
  ASSERT_TRUE(cleared);
  EXPECT_TRUE((*cleared)->policies().empty());
  EXPECT_TRUE((*cleared)->global_policies().empty());
  EXPECT_EQ((*next)->policies().size(), 1u);
}

}  // namespace
}  // namespace meshnode::state
