// WorkerLoads (issue 15): the least-connections choice of a worker for an accepted connection.
#include <gtest/gtest.h>

#include <string>

#include "proxy/worker_loads.hpp"

namespace meshnode::proxy {
namespace {

TEST(WorkerLoads, PicksTheWorkerWithFewestOpenConnectionsAndStaysHomeOnATie) {
  WorkerLoads loads(3);
  EXPECT_EQ(loads.pick(1), 1u) << "all empty: no hand-off";
  loads.add(1);
  EXPECT_EQ(loads.pick(1), 0u) << "another has fewer: the lowest such index";
  loads.add(0);
  EXPECT_EQ(loads.pick(1), 2u);
  loads.add(2);
  EXPECT_EQ(loads.pick(2), 2u) << "1 / 1 / 1: stays where it was accepted";
  loads.remove(0);
  EXPECT_EQ(loads.pick(2), 0u) << "a connection that ended gives its place back";
  EXPECT_EQ(loads.open(0), 0u);
  EXPECT_EQ(loads.open(1), 1u);
}

TEST(WorkerLoads, ExportsEachWorkersOpenConnectionsAndTheHandOffs) {
  telemetry::MetricsRegistry registry;
  WorkerLoads loads(2, &registry);
  loads.add(0);
  loads.add(1);
  loads.add(1);
  loads.remove(1);
  loads.count_handoff();
  const std::string text = registry.render();
  EXPECT_NE(text.find("meshnode_worker_open_connections{worker=\"0\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("meshnode_worker_open_connections{worker=\"1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("meshnode_worker_handoffs_total 1\n"), std::string::npos) << text;
}

TEST(WorkerLoads, OneWorkerAlwaysPicksItself) {
  WorkerLoads loads(1);
  loads.add(0);
  loads.add(0);
  EXPECT_EQ(loads.pick(0), 0u);
  EXPECT_EQ(WorkerLoads(0).size(), 1u) << "no workers is treated as one";
}

}  // namespace
}  // namespace meshnode::proxy
