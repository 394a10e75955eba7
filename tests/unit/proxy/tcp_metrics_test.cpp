#include "proxy/tcp_metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
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

// What TcpMetrics rendered before it cached series per thread: every event straight to the
// registry. The cached path must render the same bytes for the same events.
struct RegistryOnly {
  MetricsRegistry& r;
  TcpMetrics::Handle on_open(const TrafficLabels& tl) {
    Labels l = to_labels(tl);
    r.counter("istio_tcp_connections_opened_total", "The total number of TCP connections opened", l).inc();
    auto& sent = r.counter("istio_tcp_sent_bytes_total",
                           "The size of total bytes sent during response in case of a TCP connection", l);
    auto& recv = r.counter("istio_tcp_received_bytes_total",
                           "The size of total bytes received during request in case of a TCP connection", l);
    return {&sent, &recv};
  }
  void on_close(const TrafficLabels& tl, bool failed) {
    Labels l = to_labels(tl);
    if (failed)
      r.counter("istio_tcp_connections_failed_total", "The total number of TCP connections that failed to establish", l)
          .inc();
    r.counter("istio_tcp_connections_closed_total", "The total number of TCP connections closed", l).inc();
  }
};

std::vector<TrafficLabels> label_sets() {
  std::vector<TrafficLabels> out;
  for (int i = 0; i < 3; ++i) {
    TrafficLabels tl;
    tl.reporter = i == 2 ? "destination" : "source";
    tl.source_workload = "client-" + std::to_string(i);
    tl.destination_service = "svc.ns.svc.cluster.local";
    tl.source_principal = i == 1 ? "" : "spiffe://cluster.local/ns/ns/sa/client";
    tl.connection_security_policy = "mutual_tls";
    out.push_back(tl);
  }
  return out;
}

TEST(TcpMetrics, RendersTheSameBytesAsDirectRegistryLookups) {
  MetricsRegistry cached_registry;
  MetricsRegistry direct_registry;
  TcpMetrics cached(cached_registry);
  RegistryOnly direct{direct_registry};
  const auto sets = label_sets();
  for (int i = 0; i < 50; ++i) {
    const TrafficLabels& tl = sets[static_cast<std::size_t>(i * 7) % sets.size()];
    auto a = cached.on_open(tl);
    auto b = direct.on_open(tl);
    a.sent->inc(static_cast<std::uint64_t>(i));
    b.sent->inc(static_cast<std::uint64_t>(i));
    a.received->inc(3);
    b.received->inc(3);
    const bool failed = i % 5 == 4;
    TrafficLabels final_labels = tl;
    final_labels.response_flags = failed ? (i % 2 ? "DENY" : "CONNECT") : "-";
    cached.on_close(tl, final_labels.response_flags, failed);
    direct.on_close(final_labels, failed);
  }
  EXPECT_EQ(cached_registry.render(), direct_registry.render());
}

TEST(TcpMetrics, CountsFromManyThreadsAddUpExactly) {
  MetricsRegistry registry;
  TcpMetrics metrics(registry);
  const auto sets = label_sets();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const TrafficLabels& tl = sets[static_cast<std::size_t>(i + t) % sets.size()];
        auto h = metrics.on_open(tl);
        h.sent->inc(2);
        h.received->inc(1);
        const bool failed = i % 10 == 0;
        metrics.on_close(tl, failed ? "CONNECT" : "-", failed);
      }
    });
  }
  for (auto& th : threads) th.join();

  std::uint64_t opened = 0, closed = 0, failed = 0, sent = 0, received = 0;
  for (const auto& tl : sets) {
    TrafficLabels f = tl;
    f.response_flags = "CONNECT";
    opened += registry.counter("istio_tcp_connections_opened_total", "", to_labels(tl)).value();
    sent += registry.counter("istio_tcp_sent_bytes_total", "", to_labels(tl)).value();
    received += registry.counter("istio_tcp_received_bytes_total", "", to_labels(tl)).value();
    closed += registry.counter("istio_tcp_connections_closed_total", "", to_labels(tl)).value();
    closed += registry.counter("istio_tcp_connections_closed_total", "", to_labels(f)).value();
    failed += registry.counter("istio_tcp_connections_failed_total", "", to_labels(f)).value();
    EXPECT_EQ(registry.counter("istio_tcp_connections_failed_total", "", to_labels(tl)).value(), 0u);
  }
  constexpr std::uint64_t kTotal = std::uint64_t{kThreads} * kPerThread;
  EXPECT_EQ(opened, kTotal);
  EXPECT_EQ(closed, kTotal);
  EXPECT_EQ(failed, kTotal / 10);
  EXPECT_EQ(sent, 2 * kTotal);
  EXPECT_EQ(received, kTotal);
  // Per label set too: thread t sees set (i + t) % 3 for i in [0, kPerThread).
  std::vector<std::uint64_t> expect(sets.size(), 0);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i) ++expect[static_cast<std::size_t>(i + t) % sets.size()];
  for (std::size_t k = 0; k < sets.size(); ++k)
    EXPECT_EQ(registry.counter("istio_tcp_connections_opened_total", "", to_labels(sets[k])).value(), expect[k]) << k;
}

TEST(TcpMetrics, ANewInstanceNeverSeesAnotherOnesCache) {
  // Instances come and go in tests (and may reuse an address): each counts into its own registry.
  const auto sets = label_sets();
  for (int round = 0; round < 3; ++round) {
    MetricsRegistry registry;
    auto metrics = std::make_unique<TcpMetrics>(registry);
    metrics->on_open(sets[0]);
    metrics->on_close(sets[0], false);
    EXPECT_EQ(registry.counter("istio_tcp_connections_opened_total", "", to_labels(sets[0])).value(), 1u);
    EXPECT_EQ(registry.counter("istio_tcp_connections_closed_total", "", to_labels(sets[0])).value(), 1u);
  }
}

}  // namespace
}  // namespace meshnode::proxy
