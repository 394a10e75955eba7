#include "proxy/connection_log.hpp"

#include "proxy/copy.hpp"

#include <spdlog/spdlog.h>

namespace meshnode::proxy {
namespace {

std::string quoted_or_dash(const std::string& v) { return v.empty() ? "-" : "\"" + v + "\""; }

}  // namespace

void set_source(TrafficLabels& l, const state::Workload& w) {
  l.source_workload = w.workload_name.empty() ? w.name : w.workload_name;
  l.source_canonical_service = w.canonical_name.empty() ? l.source_workload : w.canonical_name;
  l.source_canonical_revision = w.canonical_revision.empty() ? "latest" : w.canonical_revision;
  l.source_workload_namespace = w.ns;
  l.source_app = l.source_canonical_service;
  l.source_version = l.source_canonical_revision;
  l.source_cluster = w.cluster_id;
}

void set_destination(TrafficLabels& l, const state::Workload& w) {
  l.destination_workload = w.workload_name.empty() ? w.name : w.workload_name;
  l.destination_canonical_service = w.canonical_name.empty() ? l.destination_workload : w.canonical_name;
  l.destination_canonical_revision = w.canonical_revision.empty() ? "latest" : w.canonical_revision;
  l.destination_workload_namespace = w.ns;
  l.destination_app = l.destination_canonical_service;
  l.destination_version = l.destination_canonical_revision;
  l.destination_cluster = w.cluster_id;
}

bool is_failure(const std::optional<base::Error>& error) {
  if (!error) return false;
  return error->code != base::Errc::kReset && error->code != base::Errc::kClosed;
}

std::string response_flags_for(const std::optional<base::Error>& error) {
  if (!is_failure(error)) return "-";
  switch (error->code) {
    case base::Errc::kPolicyDenied: return "DENY";
    case base::Errc::kTlsHandshake: return "TLS_FAILURE";
    case base::Errc::kIdentityMismatch: return "IDENTITY_ERROR";
    case base::Errc::kProtocol: return "H2_HANDSHAKE_FAILURE";
    default: return "CONNECT";
  }
}

TrafficLabels& ConnectionRecord::draft_labels() {
  if (!draft_) draft_ = std::make_unique<TrafficLabels>();
  return *draft_;
}

const TrafficLabels& ConnectionRecord::labels() const {
  static const TrafficLabels kDefaults;
  if (shared_ != nullptr) return *shared_;
  return draft_ ? *draft_ : kDefaults;
}

void ConnectionRecord::share_labels(const TrafficLabels* shared) {
  shared_ = shared;
  draft_.reset();
}

void log_connection(const ConnectionRecord& r) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - r.start);
  const auto& l = r.labels();
  std::string line = fmt::format(
      "access\tconnection complete\tid={} src.addr={} src.workload={} src.namespace={} src.identity={} "
      "dst.addr={} dst.hbone_addr={} dst.service={} dst.workload={} dst.namespace={} dst.identity={} "
      "direction={} bytes_sent={} bytes_recv={} duration={}ms",
      r.id.empty() ? "-" : r.id, r.src_addr.to_string(), l.source_workload.empty() ? "-" : l.source_workload,
      l.source_workload_namespace.empty() ? "-" : l.source_workload_namespace, quoted_or_dash(l.source_principal),
      r.dst_addr.empty() ? "-" : r.dst_addr, r.dst_hbone_addr.empty() ? "-" : r.dst_hbone_addr,
      r.dst_service.empty() ? "-" : r.dst_service, l.destination_workload.empty() ? "-" : l.destination_workload,
      l.destination_workload_namespace.empty() ? "-" : l.destination_workload_namespace,
      quoted_or_dash(l.destination_principal), r.direction, r.moved.upstream_to_downstream, r.moved.downstream_to_upstream, ms.count());
  const auto& error = r.moved.error;
  if (is_failure(error)) {
    spdlog::error("{} error=\"{}\"", line, error->message());
  } else if (error) {
    // A reset or close by a peer is how TCP ends, not a proxy failure; but "0 bytes" alone would
    // hide which side ended it and how.
    spdlog::info("{} ended=\"{}\"", line, error->message());
  } else {
    spdlog::info("{}", line);
  }
}

void record_close(TcpMetrics& metrics, ConnectionRecord& rec, std::optional<base::Error> outcome) {
  if (outcome) rec.moved.error = std::move(outcome);
  metrics.on_close(rec.labels(), response_flags_for(rec.moved.error), is_failure(rec.moved.error));
  log_connection(rec);
}

void record_refusal(TcpMetrics& metrics, ConnectionRecord& rec, base::Error error, bool opened) {
  if (!opened) metrics.on_open(rec.labels());
  rec.moved.error = std::move(error);
  metrics.on_close(rec.labels(), response_flags_for(rec.moved.error), true);
  log_connection(rec);
}

}  // namespace meshnode::proxy
