#pragma once

// Compares two snapshots through their public read API: same workloads, services, policies,
// address and VIP lookups, and endpoint lists (tests of incremental snapshots against full builds).

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "state/snapshot.hpp"

namespace meshnode::state::test {

inline std::vector<std::string> endpoint_uids(const StateSnapshot& s, std::string_view key) {
  std::vector<std::string> out;
  for (const auto& e : s.endpoints(key)) out.push_back(e.workload->uid);
  return out;
}

inline void expect_same_snapshot(const StateSnapshot& got, const StateSnapshot& want) {
  ASSERT_EQ(got.workloads().size(), want.workloads().size());
  std::set<std::string> service_keys;
  auto w = want.workloads().begin();
  for (const auto& [uid, workload] : got.workloads()) {
    EXPECT_EQ(uid, w->first);
    EXPECT_EQ(*workload, *w->second) << uid;
    ++w;
  }
  for (const auto* s : {&got, &want}) {
    for (const auto& [uid, workload] : s->workloads()) {
      for (const auto& ip : workload->addresses) {
        auto a = got.workload_by_address(workload->network, ip);
        auto b = want.workload_by_address(workload->network, ip);
        ASSERT_EQ(a == nullptr, b == nullptr) << ip.to_string();
        if (a) {
          EXPECT_EQ(a->uid, b->uid) << ip.to_string();
        }
      }
      for (const auto& [key, ports] : workload->services) service_keys.emplace(key);
    }
  }
  ASSERT_EQ(got.services().size(), want.services().size());
  auto s = want.services().begin();
  for (const auto& [key, service] : got.services()) {
    EXPECT_EQ(key, s->first);
    EXPECT_EQ(service, s->second) << key;
    service_keys.emplace(key);
    for (const auto& v : service.vips) {
      const Service* a = got.service_by_vip(v.network, v.address);
      const Service* b = want.service_by_vip(v.network, v.address);
      ASSERT_TRUE(a != nullptr && b != nullptr) << v.to_string();
      EXPECT_EQ(a->key(), b->key());
    }
    ++s;
  }
  for (const auto& key : service_keys) {
    EXPECT_EQ(endpoint_uids(got, key), endpoint_uids(want, key)) << key;
    auto a = got.endpoints(key);
    auto b = want.endpoints(key);
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      EXPECT_TRUE(std::equal(a[i].ports.begin(), a[i].ports.end(), b[i].ports.begin(), b[i].ports.end())) << key;
    }
  }
  ASSERT_EQ(got.policies().size(), want.policies().size());
  auto p = want.policies().begin();
  for (const auto& [key, policy] : got.policies()) {
    EXPECT_EQ(key, p->first);
    ++p;
  }
  EXPECT_EQ(got.global_policies().size(), want.global_policies().size());
}

}  // namespace meshnode::state::test
