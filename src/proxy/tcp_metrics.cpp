#include "proxy/tcp_metrics.hpp"

#include <thread>

namespace meshnode::proxy {
namespace {

constexpr std::string_view kOpenedHelp = "The total number of TCP connections opened";
constexpr std::string_view kClosedHelp = "The total number of TCP connections closed";
constexpr std::string_view kFailedHelp = "The total number of TCP connections that failed to establish";
constexpr std::string_view kSentHelp = "The size of total bytes sent during response in case of a TCP connection";
constexpr std::string_view kReceivedHelp =
    "The size of total bytes received during request in case of a TCP connection";

std::atomic<std::uint64_t> next_metrics_id{1};

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

TcpMetrics::TcpMetrics(telemetry::MetricsRegistry& registry)
    : registry_(registry), id_(next_metrics_id.fetch_add(1, std::memory_order_relaxed)) {}

TcpMetrics::~TcpMetrics() = default;

std::size_t TcpMetrics::LabelViewHash::operator()(const LabelView& v) const noexcept {
  std::size_t h = 0;
  for (std::string_view s : v) h = (h ^ std::hash<std::string_view>{}(s)) * 0x100000001b3ULL + 0x9e3779b97f4a7c15ULL;
  return h;
}

namespace {

// The label values of `tl` in to_labels' order, response_flags replaced by `flags`.
std::array<std::string_view, 23> view_of(const TrafficLabels& tl, std::string_view flags) {
  return {tl.reporter,
          tl.source_workload,
          tl.source_canonical_service,
          tl.source_canonical_revision,
          tl.source_workload_namespace,
          tl.source_principal,
          tl.source_app,
          tl.source_version,
          tl.source_cluster,
          tl.destination_service,
          tl.destination_service_namespace,
          tl.destination_service_name,
          tl.destination_workload,
          tl.destination_canonical_service,
          tl.destination_canonical_revision,
          tl.destination_workload_namespace,
          tl.destination_principal,
          tl.destination_app,
          tl.destination_version,
          tl.destination_cluster,
          tl.request_protocol,
          flags,
          tl.connection_security_policy};
}

}  // namespace

TcpMetrics::SeriesSet::SeriesSet(const TrafficLabels& l, std::string_view flags) : labels(l) {
  labels.response_flags = std::string(flags);
  key = view_of(labels, labels.response_flags);
}

TcpMetrics::Shard& TcpMetrics::shard() {
  // The last TcpMetrics this thread used (one per process in the proxy): no lock after the first
  // call. `id_` is never reused, so a pointer left by a destroyed TcpMetrics is never followed.
  thread_local std::uint64_t cached_id = 0;
  thread_local Shard* cached = nullptr;
  if (cached_id == id_) return *cached;
  std::lock_guard lock(shards_mu_);
  const auto me = std::this_thread::get_id();
  Shard* found = nullptr;
  for (auto& [tid, s] : shards_) {
    if (tid == me) found = s.get();  // a thread id is reused only after its thread ended
  }
  if (found == nullptr) found = shards_.emplace_back(me, std::make_unique<Shard>()).second.get();
  cached_id = id_;
  cached = found;
  return *found;
}

TcpMetrics::SeriesSet& TcpMetrics::resolve(const TrafficLabels& labels, std::string_view flags) {
  Shard& s = shard();
  const LabelView key = view_of(labels, flags);
  if (auto it = s.sets.find(key); it != s.sets.end()) return *it->second;
  auto set = std::make_unique<SeriesSet>(labels, flags);
  SeriesSet& ref = *set;
  s.sets.emplace(ref.key, std::move(set));
  return ref;
}

TcpMetrics::Handle TcpMetrics::on_open(const TrafficLabels& labels) {
  SeriesSet& set = resolve(labels, labels.response_flags);
  if (set.opened == nullptr) {
    // First use on this thread: the registry lookups, in the order the series were always created.
    telemetry::Labels l = to_labels(set.labels);
    set.opened = &registry_.counter(kOpened, kOpenedHelp, l);
    set.sent = &registry_.counter(kSent, kSentHelp, l);
    set.received = &registry_.counter(kReceived, kReceivedHelp, std::move(l));
  }
  set.opened->inc();
  return Handle{set.sent, set.received, &set.labels};
}

void TcpMetrics::on_close(const TrafficLabels& final_labels, bool failed) {
  on_close(final_labels, final_labels.response_flags, failed);
}

void TcpMetrics::on_close(const TrafficLabels& labels, std::string_view response_flags, bool failed) {
  SeriesSet& set = resolve(labels, response_flags);
  if (failed) {
    if (set.failed == nullptr) set.failed = &registry_.counter(kFailed, kFailedHelp, to_labels(set.labels));
    set.failed->inc();
  }
  if (set.closed == nullptr) set.closed = &registry_.counter(kClosed, kClosedHelp, to_labels(set.labels));
  set.closed->inc();
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
