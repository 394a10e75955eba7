#include "proxy/tcp_metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meshnode::proxy {
namespace {

using telemetry::Labels;
using telemetry::MetricsRegistry;

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

}  // namespace
}  // namespace meshnode::proxy
