#include "proxy/tcp_metrics.hpp"

namespace meshnode::proxy {
namespace {

constexpr std::string_view kOpened = "istio_tcp_connections_opened_total";
constexpr std::string_view kClosed = "istio_tcp_connections_closed_total";
constexpr std::string_view kFailed = "istio_tcp_connections_failed_total";
constexpr std::string_view kSent = "istio_tcp_sent_bytes_total";
constexpr std::string_view kReceived = "istio_tcp_received_bytes_total";
constexpr std::string_view kViolations = "meshnode_hbone_violations_total";
constexpr std::string_view kViolationsHelp = "HTTP/2 misbehaviour of inbound HBONE peers, by what was done about it";

}  // namespace

h2::ViolationCounters TcpMetrics::h2_violations() {
  h2::ViolationCounters c;
  c.header_list_too_large = &registry_.counter(kViolations, kViolationsHelp, {{"reason", "header_list_too_large"}});
  c.stream_reset = &registry_.counter(kViolations, kViolationsHelp, {{"reason", "stream_reset"}});
  c.reset_budget_exceeded = &registry_.counter(kViolations, kViolationsHelp, {{"reason", "reset_budget_exceeded"}});
  return c;
}

telemetry::Counter& TcpMetrics::hbone_refused_retries() {
  return registry_.counter("meshnode_hbone_connect_retries_total",
                           "Outbound HBONE CONNECTs sent again on another connection, by why the first attempt failed",
                           {{"reason", "refused"}});
}

telemetry::Labels to_labels(const TrafficLabels& tl) {
  return {
      {"reporter", tl.reporter},
      {"source_workload", tl.source_workload},
      {"source_canonical_service", tl.source_canonical_service},
      {"source_canonical_revision", tl.source_canonical_revision},
      {"source_workload_namespace", tl.source_workload_namespace},
      {"source_principal", tl.source_principal},
      {"source_app", tl.source_app},
      {"source_version", tl.source_version},
      {"source_cluster", tl.source_cluster},
      {"destination_service", tl.destination_service},
      {"destination_service_namespace", tl.destination_service_namespace},
      {"destination_service_name", tl.destination_service_name},
      {"destination_workload", tl.destination_workload},
      {"destination_canonical_service", tl.destination_canonical_service},
      {"destination_canonical_revision", tl.destination_canonical_revision},
      {"destination_workload_namespace", tl.destination_workload_namespace},
      {"destination_principal", tl.destination_principal},
      {"destination_app", tl.destination_app},
      {"destination_version", tl.destination_version},
      {"destination_cluster", tl.destination_cluster},
      {"request_protocol", tl.request_protocol},
      {"response_flags", tl.response_flags},
      {"connection_security_policy", tl.connection_security_policy},
  };
}

TcpMetrics::Handle TcpMetrics::on_open(const TrafficLabels& labels) {
  telemetry::Labels l = to_labels(labels);
  registry_.counter(kOpened, "The total number of TCP connections opened", l).inc();
  telemetry::Counter& sent =
      registry_.counter(kSent, "The size of total bytes sent during response in case of a TCP connection", l);
  telemetry::Counter& received = registry_.counter(
      kReceived, "The size of total bytes received during request in case of a TCP connection", std::move(l));
  return Handle{&sent, &received};
}

void TcpMetrics::on_close(const TrafficLabels& final_labels, bool failed) {
  telemetry::Labels l = to_labels(final_labels);
  if (failed)
    registry_.counter(kFailed, "The total number of TCP connections that failed to establish", l).inc();
  registry_.counter(kClosed, "The total number of TCP connections closed", std::move(l)).inc();
}

void TcpMetrics::on_handshake_failure(std::string_view reason) {
  registry_
      .counter("meshnode_inbound_handshake_failures_total",
               "Inbound HBONE connections whose TLS setup failed, by reason", {{"reason", std::string(reason)}})
      .inc();
}

void TcpMetrics::on_invalid_traceparent() {
  registry_
      .counter("meshnode_inbound_invalid_traceparent_total",
               "Inbound CONNECTs whose traceparent header was malformed and dropped")
      .inc();
}

}  // namespace meshnode::proxy
