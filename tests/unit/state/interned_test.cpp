#include "state/interned.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "state/workload.hpp"

namespace meshnode::state {
namespace {

TEST(InternedString, ReadsLikeAString) {
  InternedString ns = "default";
  std::string text = "prod";
  InternedString other;
  other = text;
  EXPECT_EQ(ns, "default");
  EXPECT_EQ(ns, std::string("default"));
  EXPECT_EQ(ns, std::string_view("default"));
  EXPECT_NE(ns, other);
  EXPECT_EQ(other.str(), "prod");
  EXPECT_EQ(ns + "/" + other, "default/prod");
  EXPECT_EQ("x-" + ns, "x-default");
  EXPECT_EQ(text + ns, "proddefault");
  const std::string& ref = ns;
  std::string_view view = ns;
  EXPECT_EQ(ref, "default");
  EXPECT_EQ(view, "default");
  EXPECT_EQ(ns.size(), 7u);
  EXPECT_LT(ns, other);
  EXPECT_TRUE(InternedString().empty());
  EXPECT_EQ(InternedString(""), InternedString());
  // A ternary between a std::string and an interned field stays a std::string (no ambiguity).
  std::string picked = text.empty() ? text : ns;
  EXPECT_EQ(picked, "default");
}

TEST(InternedString, EqualValuesShareOneEntryAndTheLastHolderFreesIt) {
  std::size_t before = InternedString::pool_size_for_test();
  {
    InternedString a(std::string_view("interned-test-value"));
    InternedString b = InternedString::cached("interned-test-value");
    EXPECT_EQ(a.data(), b.data());  // one entry
    EXPECT_EQ(InternedString::pool_size_for_test(), before + 1);
    InternedString c = std::move(a);
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(c, b);
  }
  // cached() keeps the value in this thread's cache; a fresh thread's values all go.
  std::thread([before] {
    { InternedString d(std::string_view("interned-test-other")); }
    EXPECT_LE(InternedString::pool_size_for_test(), before + 1);
  }).join();
}

TEST(InternedString, ConcurrentInternAndReleaseKeepCountsRight) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 20000; ++i) {
        InternedString a(std::string_view("race-" + std::to_string(i % 7)));
        InternedString b = a;
        EXPECT_EQ(a, b);
      }
    });
  }
  for (auto& t : threads) t.join();
  InternedString probe(std::string_view("race-3"));
  EXPECT_EQ(probe, "race-3");
}

TEST(InternedString, PoolFindsEveryLiveValueWhileOthersLeaveInAnyOrder) {
  std::size_t before = InternedString::pool_size_for_test();
  std::vector<InternedString> held;
  for (int i = 0; i < 5000; ++i) held.emplace_back(std::string_view("pool-order-" + std::to_string(i)));
  EXPECT_EQ(InternedString::pool_size_for_test(), before + 5000);
  // Release a pseudo-random half; the other half must still be found (same entry), not re-added.
  std::vector<bool> gone(5000, false);
  for (int k = 0; k < 2500; ++k) {
    int i = (k * 7919) % 5000;
    gone[static_cast<std::size_t>(i)] = true;
    held[static_cast<std::size_t>(i)] = InternedString();
  }
  EXPECT_EQ(InternedString::pool_size_for_test(), before + 2500);
  for (int i = 0; i < 5000; ++i) {
    InternedString again(std::string_view("pool-order-" + std::to_string(i)));
    if (!gone[static_cast<std::size_t>(i)]) {
      EXPECT_EQ(again.data(), held[static_cast<std::size_t>(i)].data()) << i;
    }
  }
  EXPECT_EQ(InternedString::pool_size_for_test(), before + 2500);
  held.clear();
  EXPECT_EQ(InternedString::pool_size_for_test(), before);
}

TEST(InternedStringBatch, HandlesOutliveTheBatchAndTheLastHolderStillFreesTheEntry) {
  std::size_t before = InternedString::pool_size_for_test();
  std::vector<InternedString> kept;
  {
    InternedStringBatch batch;
    InternedString plain(std::string_view("batch-test-0"));
    // More handles per value than one refill reserves, and more values than the first table.
    for (int i = 0; i < 300 * 200; ++i) {
      // Plain lookups and the per-site shortcut (hits for repeats, misses across table growth).
      std::string value = "batch-test-" + std::to_string(i % 300);
      InternedString s = i % 3 == 0 ? batch.get(value) : batch.get(value, static_cast<std::size_t>(i / 7 % 20));
      EXPECT_EQ(s, "batch-test-" + std::to_string(i % 300));
      if (i % 300 == 0) {
        EXPECT_EQ(s.data(), plain.data());  // the pool's entry, not a copy
      }
      if (i % 1000 == 7) kept.push_back(std::move(s));
    }
    EXPECT_EQ(batch.size(), 300u);
    EXPECT_TRUE(batch.get("").empty());
    EXPECT_EQ(InternedString::pool_size_for_test(), before + 300);
  }
  // The batch returned what it had reserved: only the kept handles hold entries now.
  std::size_t distinct_kept = 0;
  for (int v = 0; v < 300; ++v) {
    std::string value = "batch-test-" + std::to_string(v);
    if (std::any_of(kept.begin(), kept.end(), [&](const InternedString& k) { return k == value; }))
      ++distinct_kept;
  }
  EXPECT_EQ(InternedString::pool_size_for_test(), before + distinct_kept);
  kept.clear();
  EXPECT_EQ(InternedString::pool_size_for_test(), before);
}

TEST(InternedStringBatch, BatchesOnSeveralThreadsShareEntries) {
  std::size_t before = InternedString::pool_size_for_test();
  std::vector<std::vector<InternedString>> out(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&out, t] {
      InternedStringBatch batch;
      for (int i = 0; i < 20000; ++i) out[t].push_back(batch.get("shared-" + std::to_string(i % 50)));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(InternedString::pool_size_for_test(), before + 50);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(out[t][17].data(), out[0][17].data());
  out.clear();
  EXPECT_EQ(InternedString::pool_size_for_test(), before);
}

TEST(WorkloadServices, ReadsLikeTheMapItReplaces) {
  WorkloadServices s;
  s["ns/b"] = {{80, 8080}};
  s["ns/a"] = {};
  EXPECT_TRUE(s.emplace("ns/c", {{443, 8443}}));
  EXPECT_FALSE(s.emplace("ns/c", {}));
  std::vector<std::string> keys;
  for (const auto& [key, ports] : s) keys.emplace_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"ns/a", "ns/b", "ns/c"}));
  EXPECT_EQ(s.at("ns/b").at(0).target_port, 8080);
  EXPECT_TRUE(s.contains("ns/a"));
  EXPECT_FALSE(s.contains("ns/z"));
  EXPECT_THROW((void)s.at("ns/z"), std::out_of_range);
  WorkloadServices from_map(std::map<std::string, std::vector<PortMapping>>{{"ns/a", {}}, {"ns/b", {{80, 8080}}}});
  EXPECT_EQ(from_map.size(), 2u);
}

}  // namespace
}  // namespace meshnode::state
