#include "state/store.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace meshnode::state {
namespace {

TEST(StateStore, ReadersSeeEitherTheOldOrTheNewSnapshotWhole) {
  auto empty = StateSnapshot::empty();
  Workload w;
  w.uid = "cluster1//v1/Pod/default/a";
  auto one = StateSnapshot::build({w}, {}, {});
  ASSERT_TRUE(one) << one.error().message();
  StateStore store(empty);
  EXPECT_EQ(store.load(), empty);

  std::vector<std::thread> readers;
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto s = store.load();
        if (s != empty && s != *one) torn.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 1000; ++i) store.store(i % 2 == 0 ? *one : empty);
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(store.load(), empty);
  store.store(*one);
  EXPECT_NE(store.load()->workload_by_uid("cluster1//v1/Pod/default/a"), nullptr);
}

}  // namespace
}  // namespace meshnode::state
