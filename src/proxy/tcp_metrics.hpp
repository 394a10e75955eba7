#pragma once

#include <string>
#include <string_view>

#include "telemetry/metrics.hpp"

#include "h2/budget.hpp"

namespace meshnode::proxy {

/// Istio's standard TCP traffic labels ("TL", feature map §5.1). Empty fields render as
/// "unknown". Emitted by `to_labels` in exactly the declaration order below, which is Istio's.
struct TrafficLabels {
  std::string reporter;  ///< "source" (outbound side) | "destination" (inbound side)
  std::string source_workload;
  std::string source_canonical_service;
  std::string source_canonical_revision;
  std::string source_workload_namespace;
  std::string source_principal;  ///< SPIFFE id of the client, or empty
  std::string source_app;
  std::string source_version;
  std::string source_cluster;
  std::string destination_service;  ///< service hostname
  std::string destination_service_namespace;
  std::string destination_service_name;
  std::string destination_workload;
  std::string destination_canonical_service;
  std::string destination_canonical_revision;
  std::string destination_workload_namespace;
  std::string destination_principal;  ///< SPIFFE id of the server, or empty
  std::string destination_app;
  std::string destination_version;
  std::string destination_cluster;
  std::string request_protocol = "tcp";
  std::string response_flags = "-";                    ///< "-", "DENY", "CONNECT", "TLS_FAILURE", ...
  std::string connection_security_policy = "unknown";  ///< "mutual_tls" | "unknown"
};

/// The label pairs of `tl` in Istio's order (§5.1): reporter, source_* (8), destination_* (11),
/// request_protocol, response_flags, connection_security_policy.
[[nodiscard]] telemetry::Labels to_labels(const TrafficLabels& tl);

/// Istio's four stable TCP connection metrics plus the two byte counters, over a registry.
/// Any thread may call; each call does registry lookups (mutex), the returned byte counters are
/// lock-free.
class TcpMetrics {
 public:
  explicit TcpMetrics(telemetry::MetricsRegistry& registry) : registry_(registry) {}

  /// Live byte counters of one connection: `sent` = istio_tcp_sent_bytes_total (server→client),
  /// `received` = istio_tcp_received_bytes_total (client→server). Valid for the registry's life.
  struct Handle {
    telemetry::Counter* sent;
    telemetry::Counter* received;
  };

  /// Counts a connection open (istio_tcp_connections_opened_total{TL}) and returns its byte
  /// counters under the same labels (created at 0 so they render from the start).
  Handle on_open(const TrafficLabels& labels);

  /// Counts a connection end under its final labels (final `response_flags`):
  /// istio_tcp_connections_closed_total, plus istio_tcp_connections_failed_total when `failed`.
  void on_close(const TrafficLabels& final_labels, bool failed);

  /// meshnode_hbone_violations_total{reason}: HTTP/2 peers' misbehaviour the inbound HBONE
  /// server defended against (reason = header_list_too_large, stream_reset,
  /// reset_budget_exceeded). Valid for the registry's life.
  h2::ViolationCounters h2_violations();

  /// meshnode_hbone_connect_retries_total{reason="refused"}: outbound CONNECTs a peer refused
  /// unprocessed (its GOAWAY crossed them: a draining proxy) and the pool sent again on another
  /// connection. Valid for the registry's life.
  telemetry::Counter& hbone_refused_retries();

  /// Counts an inbound HBONE connection whose TLS setup failed:
  /// meshnode_inbound_handshake_failures_total{reason} (reason: see Inbound, a short fixed set).
  void on_handshake_failure(std::string_view reason);

  /// Counts a CONNECT whose traceparent was not W3C-valid and was dropped:
  /// meshnode_inbound_invalid_traceparent_total.
  void on_invalid_traceparent();

 private:
  telemetry::MetricsRegistry& registry_;
};

}  // namespace meshnode::proxy
