#include "admin/metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "admin/readiness.hpp"
#include "admin/tcp_metrics.hpp"

namespace meshnode::admin {
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

TEST(TcpMetrics, LabelsFollowIstioOrder) {
  const std::vector<std::string> expected = {"reporter",
                                             "source_workload",
                                             "source_canonical_service",
                                             "source_canonical_revision",
                                             "source_workload_namespace",
                                             "source_principal",
                                             "source_app",
                                             "source_version",
                                             "source_cluster",
                                             "destination_service",
                                             "destination_service_namespace",
                                             "destination_service_name",
                                             "destination_workload",
                                             "destination_canonical_service",
                                             "destination_canonical_revision",
                                             "destination_workload_namespace",
                                             "destination_principal",
                                             "destination_app",
                                             "destination_version",
                                             "destination_cluster",
                                             "request_protocol",
                                             "response_flags",
                                             "connection_security_policy"};
  TrafficLabels tl;
  tl.reporter = "destination";
  tl.destination_principal = "spiffe://cluster.local/ns/default/sa/server";
  const Labels labels = to_labels(tl);
  ASSERT_EQ(labels.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(labels[i].first, expected[i]) << i;
  EXPECT_EQ(labels[0].second, "destination");
  EXPECT_EQ(labels[16].second, "spiffe://cluster.local/ns/default/sa/server");
  EXPECT_EQ(labels[20].second, "tcp");
  EXPECT_EQ(labels[21].second, "-");
  EXPECT_EQ(labels[22].second, "unknown");
}

TEST(TcpMetrics, CountsOpenCloseFailAndLiveBytes) {
  MetricsRegistry registry;
  TcpMetrics metrics(registry);
  TrafficLabels tl;
  tl.reporter = "source";
  tl.source_workload = "client";
  tl.connection_security_policy = "mutual_tls";
  TcpMetrics::Handle handle = metrics.on_open(tl);
  handle.sent->inc(100);
  handle.received->inc(42);
  metrics.on_close(tl, false);
  TrafficLabels denied = tl;
  denied.response_flags = "DENY";
  metrics.on_open(tl);
  metrics.on_close(denied, true);

  const Labels l = to_labels(tl);
  const Labels d = to_labels(denied);
  EXPECT_EQ(registry.counter("istio_tcp_connections_opened_total", "", l).value(), 2u);
  EXPECT_EQ(registry.counter("istio_tcp_sent_bytes_total", "", l).value(), 100u);
  EXPECT_EQ(registry.counter("istio_tcp_received_bytes_total", "", l).value(), 42u);
  EXPECT_EQ(registry.counter("istio_tcp_connections_closed_total", "", l).value(), 1u);
  EXPECT_EQ(registry.counter("istio_tcp_connections_closed_total", "", d).value(), 1u);
  EXPECT_EQ(registry.counter("istio_tcp_connections_failed_total", "", d).value(), 1u);
  EXPECT_EQ(registry.counter("istio_tcp_connections_failed_total", "", l).value(), 0u);

  const std::string text = registry.render();
  EXPECT_NE(text.find("istio_tcp_connections_opened_total{reporter=\"source\",source_workload=\"client\","
                      "source_canonical_service=\"unknown\","),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "request_protocol=\"tcp\",response_flags=\"DENY\",connection_security_policy=\"mutual_tls\"} 1"),
      std::string::npos)
      << text;
}

TEST(TcpMetrics, BuildInfo) {
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
}  // namespace meshnode::admin
