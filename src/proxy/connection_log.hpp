#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/tcp_metrics.hpp"
#include "base/error.hpp"
#include "base/ip.hpp"
#include "proxy/transferred.hpp"
#include "state/workload.hpp"

namespace meshnode::proxy {

/// Everything the access log and the closing metrics need about one proxied connection.
/// Field names follow ztunnel's access log (research §5.3). Byte counts follow Istio's metric
/// meaning: the log's `bytes_recv` = client → server (`moved.downstream_to_upstream`),
/// `bytes_sent` = server → client (`moved.upstream_to_downstream`).
struct ConnectionRecord {
  std::string id;                  ///< connection id (traceparent trace id for HBONE)
  std::string_view direction;      ///< "outbound" | "inbound" (a literal)
  base::SocketAddr src_addr;
  std::string dst_addr;            ///< next hop, e.g. podIP:15008
  std::string dst_hbone_addr;      ///< CONNECT :authority, empty when not HBONE
  std::string dst_service;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  /// The copy writes its counts and first error here directly; `moved.error` is the connection's
  /// outcome once record_close/record_refusal ran. (A Transferred of its own in each connection
  /// coroutine would take 72 B of frame for the connection's life: issue 15, idle memory.)
  Transferred moved;

  /// The labels (reporter, workloads, principals, security policy) while the connection is set
  /// up; allocated on first use. Not after share_labels().
  TrafficLabels& draft_labels();
  /// The connection's labels: the shared copy once share_labels() ran, else the draft, else the
  /// defaults.
  [[nodiscard]] const TrafficLabels& labels() const;
  /// Once counted opened: reads go to `shared` (TcpMetrics::Handle::labels, equal to the draft
  /// and valid for the metrics' life) and the draft is freed. Connections with one label set then
  /// share one copy instead of holding ~1 KB each for their whole life (issue 15, idle memory).
  void share_labels(const TrafficLabels* shared);

 private:
  std::unique_ptr<TrafficLabels> draft_;
  const TrafficLabels* shared_ = nullptr;
};

/// Fills the source_* labels from a workload (canonical names, namespace, cluster).
void set_source(TrafficLabels& labels, const state::Workload& workload);
/// Fills the destination_* labels from a workload.
void set_destination(TrafficLabels& labels, const state::Workload& workload);

/// Writes the single access-log line of a connection ("connection complete", info on success,
/// info with ended="…" when a peer reset or closed it, error with error="…" on failure).
void log_connection(const ConnectionRecord& record);

/// Response flag for a failed connection's closing metrics (Istio's values: "DENY",
/// "CONNECT", "TLS_FAILURE", "IDENTITY_ERROR", …) or "-" when it did not fail.
[[nodiscard]] std::string response_flags_for(const std::optional<base::Error>& error);

/// Whether an error ends a connection as a failure (resets and clean closes are not failures).
[[nodiscard]] bool is_failure(const std::optional<base::Error>& error);

/// Ends a connection whose bytes were copied into `record.moved`: its outcome (`outcome` when
/// set, e.g. "closed: policy change", else the copy's first error), the closing metrics under the
/// final response flag, and the access-log line. Each connection ends here or in record_refusal,
/// exactly once.
void record_close(TcpMetrics& metrics, ConnectionRecord& record, std::optional<base::Error> outcome = std::nullopt);

/// Ends a connection refused before its copy: counted as opened unless `opened` already, then one
/// failed close under the error's response flag, and the access-log line with the error.
void record_refusal(TcpMetrics& metrics, ConnectionRecord& record, base::Error error, bool opened);

}  // namespace meshnode::proxy
