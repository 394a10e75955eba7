// Inbound: HBONE (15008: mTLS, one CONNECT stream per tunnelled connection) and plaintext (15006)
// connections that reach an enrolled pod (research §4.2, §4.3).
#include <asio/co_spawn.hpp>
#include <spdlog/spdlog.h>

#include "hbone/headers.hpp"
#include "net/socket.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/copy.hpp"
#include "proxy/pod_worker.hpp"
#include "state/rbac.hpp"
#include "state/route.hpp"

namespace meshnode::proxy {

state::AuthzDecision PodWorker::authorize_inbound(const state::StateSnapshot& snapshot, const base::ClientAddr& source,
                                                  const std::optional<base::SpiffeId>& identity,
                                                  const base::SocketAddr& destination, const std::string& id) const {
  auto local = local_workload(snapshot);
  auto decision = state::authorize(snapshot, {source, identity, destination, local.get()});
  // Dry-run policies never change the outcome; they only say what they would have done.
  for (const auto& key : decision.dry_run_denies) {
    spdlog::info("authz\tdry-run\tid={} policy={} would deny src.addr={} dst.addr={}", id, key, source.to_string(),
                 destination.to_string());
  }
  if (decision.dry_run_allow_would_deny) {
    spdlog::info("authz\tdry-run\tid={} dry-run allow policies would deny src.addr={} dst.addr={}", id,
                 source.to_string(), destination.to_string());
  }
  return decision;
}

ConnectionTracker::Recheck PodWorker::recheck_for(base::ClientAddr source, std::optional<base::SpiffeId> identity,
                                                   base::SocketAddr destination, std::string id,
                                                   std::optional<base::Error>& closed_by_policy) const {
  return [this, source, identity = std::move(identity), destination, id = std::move(id),
          &closed_by_policy](const state::StateSnapshot& snapshot) -> std::optional<std::string> {
    auto decision = authorize_inbound(snapshot, source, identity, destination, id);
    if (decision.allowed) return std::nullopt;
    closed_by_policy = base::Error{base::Errc::kPolicyDenied, "closed: policy change: " + decision.reason};
    spdlog::info("authz\tclosed: policy change\tid={} src.addr={} dst.addr={} reason=\"{}\"", id, source.to_string(),
                 destination.to_string(), decision.reason);
    return decision.reason;
  };
}

asio::awaitable<void> PodWorker::handle_hbone_connection(asio::ip::tcp::socket socket) {
  auto self = shared_from_this();
  auto peer = net::peer_addr(socket.native_handle());
  auto identity = shared_.certs.get(pod_->identity);
  if (!identity) {
    spdlog::error("pod={} no certificate for {}: {}", pod_->uid, pod_->identity.to_string(), identity.error().message());
    co_return;
  }
  auto handler = [self](std::shared_ptr<h2::Stream> stream, std::shared_ptr<const hbone::InboundConnection> conn) {
    return self->handle_hbone_stream(std::move(stream), std::move(conn));
  };
  auto session = co_await hbone::accept_hbone(std::move(socket), (*identity)->server_ctx.get(),
                                              shared_.options.handshake_timeout, shared_.options.h2, handler);
  if (!session) {
    // Counted as a failed inbound connection; the peer never got a tunnel.
    spdlog::warn("access\tconnection failed\tsrc.addr={} direction=inbound error=\"{}\"",
                 peer ? peer->to_string() : "-", session.error().message());
    TrafficLabels labels;
    labels.reporter = "destination";
    labels.connection_security_policy = "mutual_tls";
    labels.destination_principal = pod_->identity.to_string();
    shared_.metrics.on_open(labels);
    labels.response_flags = "TLS_FAILURE";
    shared_.metrics.on_close(labels, true);
    co_return;
  }
  std::erase_if(inbound_sessions_, [](const auto& w) { return w.expired(); });
  inbound_sessions_.push_back(*session);
  if (stopped_) (*session)->drain();
}

asio::awaitable<void> PodWorker::handle_hbone_stream(std::shared_ptr<h2::Stream> stream,
                                                     std::shared_ptr<const hbone::InboundConnection> conn) {
  auto self = shared_from_this();
  // This frame lives as long as the connection: only what the copy and the closing log need.
  // Checks, authorization and the upstream connect run in open_inbound_hbone (frame freed first).
  InboundTunnel t;
  auto guard = tracker_.track([&] {
    stream->reset();
    if (t.upstream) t.upstream->reset();
  });
  if (!co_await open_inbound_hbone(t, guard, *stream, *conn)) co_return;
  auto moved = co_await copy_bidirectional(*stream, *t.upstream, t.counters->received, t.counters->sent);
  finish_inbound(t.rec, moved, t.closed_by_policy);
}

asio::awaitable<bool> PodWorker::open_inbound_hbone(InboundTunnel& t, ConnectionTracker::Guard& guard,
                                                    h2::Stream& stream, const hbone::InboundConnection& conn) {
  ConnectionRecord& rec = t.rec;
  rec.direction = "inbound";
  rec.src_addr = conn.peer.addr;
  rec.labels.reporter = "destination";
  rec.labels.connection_security_policy = "mutual_tls";
  rec.labels.source_principal = conn.peer_identity.to_string();
  auto traceparent = stream.header("traceparent");
  rec.id = traceparent.size() == 55 ? std::string(traceparent.substr(3, 32)) : next_trace_id();

  auto snapshot = shared_.state.load();
  if (auto local = local_workload(*snapshot)) {
    set_destination(rec.labels, *local);
    if (auto src = snapshot->workload_by_address(local->network, conn.peer.ip())) set_source(rec.labels, *src);
  }
  rec.labels.destination_principal = pod_->identity.to_string();
  // Every stream is counted once opened and once closed, rejected ones included.
  t.counters = shared_.metrics.on_open(rec.labels);

  auto reject = [&](int status, base::Error error) {
    if (status != 0) (void)stream.respond(status);  // 0: the stream is already gone
    auto final_labels = rec.labels;
    final_labels.response_flags = response_flags_for(error);
    shared_.metrics.on_close(final_labels, true);
    rec.error = std::move(error);
    log_connection(rec);
    return false;
  };
  if (stream.header(":method") != "CONNECT") {
    co_return reject(400, {base::Errc::kProtocol, "method " + std::string(stream.header(":method")) + " is not CONNECT"});
  }
  rec.dst_hbone_addr = std::string(stream.header(":authority"));
  auto target = hbone::parse_authority(rec.dst_hbone_addr);
  if (!target) co_return reject(400, {base::Errc::kProtocol, target.error().context});
  if (!is_own_ip(target->ip())) {
    co_return reject(400, {base::Errc::kProtocol, "ip mismatch: authority " + rec.dst_hbone_addr + " is not this pod"});
  }
  if (state::is_illegal_port(target->port())) {
    co_return reject(503, {base::Errc::kRecursiveCall, "attempted recursive call to ourselves: " + rec.dst_hbone_addr});
  }
  rec.dst_addr = target->to_string();
  auto decision = authorize_inbound(*snapshot, conn.peer, conn.peer_identity, target->addr, rec.id);
  if (!decision.allowed) co_return reject(401, {base::Errc::kPolicyDenied, decision.reason});
  guard.set_recheck(recheck_for(conn.peer, conn.peer_identity, target->addr, rec.id, t.closed_by_policy));
  const base::NextHop app{target->addr};
  auto connected = co_await connect_upstream(app, &conn.peer);
  if (!connected) co_return reject(503, connected.error());
  t.upstream = std::make_unique<net::TcpStream>(std::move(*connected));
  if (auto ok = stream.respond(200); !ok) {
    t.upstream->reset();
    co_return reject(0, ok.error());
  }
  co_return true;
}

void PodWorker::finish_inbound(ConnectionRecord& rec, Transferred& moved, std::optional<base::Error>& closed_by_policy) {
  rec.bytes_recv = moved.downstream_to_upstream;
  rec.bytes_sent = moved.upstream_to_downstream;
  rec.error = closed_by_policy ? std::move(closed_by_policy) : std::move(moved.error);
  auto final_labels = rec.labels;
  final_labels.response_flags = response_flags_for(rec.error);
  shared_.metrics.on_close(final_labels, is_failure(rec.error));
  log_connection(rec);
}

asio::awaitable<void> PodWorker::handle_inbound_plaintext(asio::ip::tcp::socket socket) {
  auto self = shared_from_this();
  ConnectionRecord rec;
  rec.direction = "inbound";
  rec.id = next_trace_id();
  rec.labels.reporter = "destination";
  auto peer = net::peer_addr(socket.native_handle());
  auto orig = net::original_dst(socket.native_handle());
  net::TcpStream downstream(std::move(socket));
  std::unique_ptr<net::TcpStream> upstream;
  auto guard = tracker_.track([&] {
    downstream.reset();
    if (upstream) upstream->reset();
  });
  if (!peer || !orig) {
    downstream.reset();
    co_return;
  }
  rec.src_addr = *peer;
  rec.dst_addr = orig->to_string();
  auto snapshot = shared_.state.load();
  if (auto local = local_workload(*snapshot)) {
    set_destination(rec.labels, *local);
    if (auto src = snapshot->workload_by_address(local->network, peer->ip)) set_source(rec.labels, *src);
  }
  auto counters = shared_.metrics.on_open(rec.labels);
  auto fail_with = [&](base::Error error) {
    downstream.reset();
    auto final_labels = rec.labels;
    final_labels.response_flags = response_flags_for(error);
    shared_.metrics.on_close(final_labels, true);
    rec.error = std::move(error);
    log_connection(rec);
  };
  if (state::is_illegal_port(orig->port)) {
    co_return fail_with({base::Errc::kRecursiveCall, "attempted recursive call to ourselves: " + orig->to_string()});
  }
  // No peer identity on this path: a "require mTLS" policy (notPrincipals: [Presence]) denies it.
  const base::ClientAddr client{*peer};
  auto decision = authorize_inbound(*snapshot, client, std::nullopt, *orig, rec.id);
  if (!decision.allowed) co_return fail_with({base::Errc::kPolicyDenied, decision.reason});
  std::optional<base::Error> closed_by_policy;
  guard.set_recheck(recheck_for(client, std::nullopt, *orig, rec.id, closed_by_policy));
  const base::NextHop app{*orig};
  auto connected = co_await connect_upstream(app, &client);
  if (!connected) co_return fail_with(connected.error());
  upstream = std::make_unique<net::TcpStream>(std::move(*connected));

  auto moved = co_await copy_bidirectional(downstream, *upstream, counters.received, counters.sent);
  finish_inbound(rec, moved, closed_by_policy);
}

}  // namespace meshnode::proxy
