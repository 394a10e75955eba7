// Outbound: a connection captured in the pod (15001) is routed by one pure decision over the
// current snapshot, then carried over HBONE, plain TCP, or passed through (research §4.1).
#include <spdlog/spdlog.h>

#include "hbone/headers.hpp"
#include "net/socket.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/copy.hpp"
#include "proxy/pod_worker.hpp"
#include "state/route.hpp"

namespace meshnode::proxy {
namespace {

// Istio baggage of the source workload (research §2.1), only non-empty members, in this order.
std::string baggage_of(const state::Workload& w) {
  std::string out;
  auto add = [&](std::string_view key, const std::string& value) {
    if (value.empty()) return;
    if (!out.empty()) out += ',';
    out += key;
    out += '=';
    out += value;
  };
  add("k8s.cluster.name", w.cluster_id);
  add("k8s.namespace.name", w.ns);
  std::string type = w.workload_type.empty() ? "pod" : w.workload_type;
  add("k8s." + type + ".name", w.workload_name.empty() ? w.name : w.workload_name);
  add("service.name", w.canonical_name);
  add("service.version", w.canonical_revision);
  return out;
}

}  // namespace

asio::awaitable<void> PodWorker::handle_outbound(asio::ip::tcp::socket socket) {
  auto self = shared_from_this();
  ConnectionRecord rec;
  rec.direction = "outbound";
  rec.id = next_trace_id();
  rec.labels.reporter = "source";
  auto peer = net::peer_addr(socket.native_handle());
  auto orig = net::original_dst(socket.native_handle());
  if (peer) rec.src_addr = *peer;
  net::TcpStream downstream(std::move(socket));
  std::shared_ptr<h2::Stream> tunnel;
  std::unique_ptr<net::TcpStream> plain;
  auto guard = tracker_.track([&] {
    downstream.reset();
    if (tunnel) tunnel->reset();
    if (plain) plain->reset();
  });

  auto finish = [&](std::optional<base::Error> error) {
    rec.error = std::move(error);
    log_connection(rec);
  };
  if (!peer || !orig) {
    downstream.reset();
    co_return finish(peer ? orig.error() : peer.error());
  }

  auto snapshot = shared_.state.load();
  auto source = snapshot->workload_by_uid(pod_->uid);
  if (!source) {
    downstream.reset();
    co_return finish(base::Error{base::Errc::kNotFound, "failed to fetch information about local workload " + pod_->uid});
  }
  set_source(rec.labels, *source);
  rec.labels.source_principal = source->identity().to_string();
  auto route = state::select_route(*snapshot, *source, *orig, rng_());
  if (!route) {
    downstream.reset();
    rec.dst_addr = orig->to_string();
    co_return finish(route.error());
  }
  rec.dst_addr = route->next_hop.to_string();
  if (route->destination) set_destination(rec.labels, *route->destination);
  if (route->service) {
    rec.dst_service = route->service->hostname;
    rec.labels.destination_service = route->service->hostname;
    rec.labels.destination_service_namespace = route->service->ns;
    rec.labels.destination_service_name = route->service->name;
  }

  net::ByteStream* upstream = nullptr;
  if (route->kind == state::Route::Kind::kHbone) {
    rec.dst_hbone_addr = route->hbone_target.to_string();
    rec.labels.connection_security_policy = "mutual_tls";
    rec.labels.destination_principal = route->destination->identity().to_string();
    hbone::ConnectInfo info{route->hbone_target, *peer, rec.dst_service, baggage_of(*source),
                            hbone::make_traceparent(0, 0, 0)};
    info.traceparent = "00-" + rec.id + "-" + fmt::format("{:016x}", rng_()) + "-00";
    hbone::PoolKey key{source->identity(), route->expected_identities, route->next_hop, peer->ip};
    auto stream = co_await pool_.connect(key, hbone::connect_headers(info));
    if (!stream) {
      downstream.reset();
      rec.labels.response_flags = response_flags_for(stream.error());
      shared_.metrics.on_close(rec.labels, true);
      co_return finish(stream.error());
    }
    tunnel = *stream;
    upstream = tunnel.get();
  } else {
    auto connected = co_await connect_upstream(route->next_hop);
    if (!connected) {
      downstream.reset();
      rec.labels.response_flags = "CONNECT";
      shared_.metrics.on_close(rec.labels, true);
      co_return finish(connected.error());
    }
    plain = std::make_unique<net::TcpStream>(std::move(*connected));
    upstream = plain.get();
  }

  auto handle = shared_.metrics.on_open(rec.labels);
  auto moved = co_await copy_bidirectional(downstream, *upstream, handle.received, handle.sent);
  rec.bytes_recv = moved.downstream_to_upstream;
  rec.bytes_sent = moved.upstream_to_downstream;
  auto final_labels = rec.labels;
  final_labels.response_flags = response_flags_for(moved.error);
  shared_.metrics.on_close(final_labels, is_failure(moved.error));
  finish(std::move(moved.error));
}

}  // namespace meshnode::proxy
