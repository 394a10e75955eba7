#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

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
/// Any thread may call. The per-connection calls (`on_open`, `on_close`) resolve their series
/// through a cache of the calling thread (a hash of the 23 label values, no allocation, no lock);
/// only the first use of a label set on a thread goes to the registry (its mutex, label strings).
/// The returned byte counters are lock-free.
class TcpMetrics {
 public:
  explicit TcpMetrics(telemetry::MetricsRegistry& registry);
  ~TcpMetrics();
  TcpMetrics(const TcpMetrics&) = delete;
  TcpMetrics& operator=(const TcpMetrics&) = delete;

  /// Live byte counters of one connection: `sent` = istio_tcp_sent_bytes_total (server→client),
  /// `received` = istio_tcp_received_bytes_total (client→server). Valid for the registry's life.
  /// `labels`: this object's copy of the labels on_open was given, shared by every connection
  /// opened under them on this thread; valid for this object's life.
  struct Handle {
    telemetry::Counter* sent;
    telemetry::Counter* received;
    const TrafficLabels* labels;
  };

  /// Counts a connection open (istio_tcp_connections_opened_total{TL}) and returns its byte
  /// counters under the same labels (created at 0 so they render from the start).
  Handle on_open(const TrafficLabels& labels);

  /// Counts a connection end under its final labels (final `response_flags`):
  /// istio_tcp_connections_closed_total, plus istio_tcp_connections_failed_total when `failed`.
  void on_close(const TrafficLabels& final_labels, bool failed);

  /// on_close under `labels` with its response_flags replaced by `response_flags` (saves the
  /// caller a copy of the labels).
  void on_close(const TrafficLabels& labels, std::string_view response_flags, bool failed);

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
  /// The 23 label values in Istio's order, response_flags possibly overridden: the cache key.
  using LabelView = std::array<std::string_view, 23>;
  struct LabelViewHash {
    std::size_t operator()(const LabelView& v) const noexcept;
  };
  /// Series of one label set, resolved lazily (closed/failed are created only when first counted,
  /// so /metrics lists exactly what the registry-only code listed).
  struct SeriesSet {
    explicit SeriesSet(const TrafficLabels& l, std::string_view flags);
    TrafficLabels labels;  // owned copy; `key` views into it
    LabelView key{};
    telemetry::Counter* opened = nullptr;
    telemetry::Counter* sent = nullptr;
    telemetry::Counter* received = nullptr;
    telemetry::Counter* closed = nullptr;
    telemetry::Counter* failed = nullptr;
  };
  /// One thread's cache. Touched only by its thread; owned here so it dies with this object.
  struct Shard {
    std::unordered_map<LabelView, std::unique_ptr<SeriesSet>, LabelViewHash> sets;
  };

  SeriesSet& resolve(const TrafficLabels& labels, std::string_view flags);
  Shard& shard();

  telemetry::MetricsRegistry& registry_;
  const std::uint64_t id_;  // process-unique, never reused: keys the threads' shard pointers
  std::mutex shards_mu_;    // taken once per thread, when its shard is created
  std::vector<std::pair<std::thread::id, std::unique_ptr<Shard>>> shards_;  // guarded by shards_mu_
};

}  // namespace meshnode::proxy
