#include "telemetry/metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "telemetry/readiness.hpp"

namespace meshnode::telemetry {
namespace {

TEST(MetricsRegistry, RendersHelpTypeAndSeriesInInsertionOrder) {
  MetricsRegistry registry;
  registry.counter("b_total", "B things", {{"z", "1"}, {"a", "2"}}).inc(3);
  registry.counter("b_total", "ignored help", {{"z", "0"}, {"a", "9"}}).inc();
  registry.gauge("a_gauge", "A gauge").set(-4);
  EXPECT_EQ(registry.render(),
            "# HELP a_gauge A gauge\n"
            "# TYPE a_gauge gauge\n"
            "a_gauge -4\n"
            "# HELP b_total B things\n"
            "# TYPE b_total counter\n"
            "b_total{z=\"1\",a=\"2\"} 3\n"
            "b_total{z=\"0\",a=\"9\"} 1\n");
}

TEST(MetricsRegistry, EscapesLabelValuesAndHelpAndRendersEmptyAsUnknown) {
  MetricsRegistry registry;
  registry.counter("x_total", "line1\nback\\slash", {{"v", "a\"b\\c\nd"}, {"e", ""}}).inc();
  EXPECT_EQ(registry.render(),
            "# HELP x_total line1\\nback\\\\slash\n"
            "# TYPE x_total counter\n"
            "x_total{v=\"a\\\"b\\\\c\\nd\",e=\"unknown\"} 1\n");
}

TEST(MetricsRegistry, SameLabelsReturnSameSeriesAndReferencesStayValid) {
  MetricsRegistry registry;
  Counter& first = registry.counter("c_total", "c", {{"k", "0"}});
  for (int i = 1; i < 1000; ++i) registry.counter("c_total", "c", {{"k", std::to_string(i)}});
  Counter& again = registry.counter("c_total", "c", {{"k", "0"}});
  EXPECT_EQ(&first, &again);
  first.inc(7);
  EXPECT_EQ(again.value(), 7u);
  Gauge& g = registry.gauge("g", "g");
  g.add(5);
  g.sub(2);
  EXPECT_EQ(registry.gauge("g", "g").value(), 3);
}

TEST(MetricsRegistry, ConcurrentIncrementsAndLookupsAreExact) {
  MetricsRegistry registry;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&registry, t] {
      Counter& shared = registry.counter("shared_total", "s");
      for (int i = 0; i < 10000; ++i) shared.inc();
      for (int i = 0; i < 100; ++i) registry.counter("per_total", "p", {{"t", std::to_string(t)}}).inc();
      (void)registry.render();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(registry.counter("shared_total", "s").value(), 40000u);
  EXPECT_EQ(registry.counter("per_total", "p", {{"t", "3"}}).value(), 100u);
}

TEST(BuildInfo, RegistersIstioBuildGaugeWithVersionTag) {
  MetricsRegistry registry;
  register_build_info(registry, "1.2.3");
  EXPECT_NE(registry.render().find("istio_build{component=\"meshnode\",tag=\"1.2.3\"} 1\n"),
            std::string::npos);
  register_build_info(registry, "");
  EXPECT_NE(registry.render().find("istio_build{component=\"meshnode\",tag=\"unknown\"} 1\n"),
            std::string::npos);
}

TEST(Readiness, PendingTasksSortedAndIdempotent) {
  Readiness readiness;
  EXPECT_TRUE(readiness.ready());
  readiness.add_pending("workload proxy manager");
  readiness.add_pending("state manager");
  readiness.add_pending("state manager");
  EXPECT_FALSE(readiness.ready());
  EXPECT_EQ(readiness.pending(), (std::vector<std::string>{"state manager", "workload proxy manager"}));
  readiness.remove_pending("state manager");
  readiness.remove_pending("never added");
  EXPECT_EQ(readiness.pending(), (std::vector<std::string>{"workload proxy manager"}));
  readiness.remove_pending("workload proxy manager");
  EXPECT_TRUE(readiness.ready());
}

}  // namespace
}  // namespace meshnode::telemetry
