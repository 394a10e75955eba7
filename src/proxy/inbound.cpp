// Inbound HBONE (15008: mTLS, one CONNECT stream per tunnelled connection) to an enrolled pod
// (research §4.2).
#include "proxy/inbound.hpp"

#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/socket.h>

#include "base/unique_fd.hpp"
#include "hbone/headers.hpp"
#include "hbone/identity.hpp"
#include "net/socket.hpp"
#include "proxy/copy.hpp"
#include "proxy/inbound_policy.hpp"
#include "state/route.hpp"

namespace meshnode::proxy {

std::string_view handshake_failure_reason(const base::Error& error) {
  const std::string& text = error.context;
  auto has = [&text](std::string_view s) { return text.find(s) != std::string::npos; };
  if (error.code == base::Errc::kLimitExceeded) {
    if (has("evicted")) return "evicted";
    return has("on this listener") ? "listener_limit" : "source_limit";
  }
  if (error.code == base::Errc::kTimeout) return "timeout";
  if (has("URI SAN") || has("not a SPIFFE id")) return "svid";  // verify.cpp svid_identity
  if (has("trust domain")) return "trust_domain";
  if (has("expired") || has("not yet valid")) return "expired";
  if (has("did not return a certificate")) return "no_certificate";
  if (has("issuer certificate") || has("self-signed") || has("revoked") || has("signature")) return "untrusted";
  if (has("ALPN") || has("application protocol")) return "alpn";
  if (has("version") || has("protocol")) return "protocol";
  return "other";
}

asio::awaitable<void> Inbound::serve(asio::ip::tcp::socket socket, TraceId id, std::shared_ptr<const void> owner) {
  auto peer = net::peer_addr(socket.native_handle());
  // Before any TLS state exists: a flood of stalled handshakes costs a socket each, not ~49 KiB.
  // Eviction shuts the socket down, so the pending handshake read ends at once. Through a dup of
  // the fd, held by the limiter's entry: the handshake may close its own fd (at its deadline)
  // before the permit goes, and that number may already belong to another connection.
  const auto started = HandshakeLimiter::Clock::now();
  auto dup = std::make_shared<base::UniqueFd>(::fcntl(socket.native_handle(), F_DUPFD_CLOEXEC, 0));
  if (!*dup) {
    count_setup_failure(base::Error{base::Errc::kIo, "dup of the inbound HBONE socket failed"}, peer, id);
    co_return;
  }
  auto acquired = pod_.handshakes.try_acquire(
      peer ? peer->ip : base::IpAddr{}, [dup] { ::shutdown(dup->get(), SHUT_RDWR); }, started);
  if (!acquired) {
    count_setup_failure(acquired.error(), peer, id);
    co_return;  // the socket closes here
  }
  std::optional<HandshakeLimiter::Permit> permit(std::move(*acquired));
  // A connection waits for the pod's certificate (first use, or renewal of an expired one) at most
  // the handshake timeout; without a valid one it fails closed, the reason naming the identity.
  auto identity = co_await hbone::acquire_identity(pod_.inputs.certs, pod_.pod->identity,
                                                   pod_.inputs.options.handshake_timeout);
  if (!identity) {
    count_setup_failure(identity.error(), peer, id);
    co_return;
  }
  hbone::StreamHandler handler = [this, owner = std::move(owner)](std::shared_ptr<h2::Stream> stream,
                                                                  std::shared_ptr<const hbone::InboundConnection> conn) {
    return serve_stream(std::move(stream), std::move(conn));
  };
  SSL_CTX* const server_ctx = (*identity)->server_ctx.get();
  h2::Settings settings = pod_.inputs.options.h2;
  settings.counters = pod_.inputs.metrics.h2_violations();
  auto session = co_await hbone::accept_hbone(std::move(socket), server_ctx, pod_.inputs.options.handshake_timeout,
                                              settings, std::move(handler), pod_.inputs.tasks,
                                              pod_.inputs.options.reset_budgets);
  const bool evicted = permit->evicted();
  permit.reset();  // the handshake is over, whatever its outcome
  if (evicted) {
    // Evicted late (after TLS, e.g. while an over-budget peer waited): its socket is shut down,
    // so a session built on it is dead; end it here with the eviction as its one outcome.
    if (session) (*session)->drain();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(HandshakeLimiter::Clock::now() - started);
    session = base::fail(base::Errc::kLimitExceeded, "TLS handshake evicted after " + std::to_string(ms.count()) +
                                                         " ms: the listener was full and it was the oldest in progress");
  }
  if (!session) {
    count_setup_failure(session.error(), peer, id);
    co_return;
  }
  std::erase_if(pod_.inbound_sessions, [](const auto& w) { return w.expired(); });
  pod_.inbound_sessions.push_back(*session);
  if (pod_.stopped) (*session)->drain();
}

void Inbound::count_setup_failure(const base::Error& error, const base::Result<base::SocketAddr>& peer, TraceId id) {
  // Counted as a failed inbound connection; the peer never got a tunnel.
  spdlog::warn("access\tconnection failed\tid={} src.addr={} direction=inbound error=\"{}\"", id.hex(),
               peer ? peer->to_string() : "-", error.message());
  TrafficLabels labels;
  labels.reporter = "destination";
  labels.connection_security_policy = "mutual_tls";
  labels.destination_principal = pod_.pod->identity.to_string();
  pod_.inputs.metrics.on_open(labels);
  labels.response_flags = "TLS_FAILURE";
  pod_.inputs.metrics.on_close(labels, true);
  pod_.inputs.metrics.on_handshake_failure(handshake_failure_reason(error));
}

asio::awaitable<void> Inbound::serve_stream(std::shared_ptr<h2::Stream> stream,
                                            std::shared_ptr<const hbone::InboundConnection> conn) {
  // This frame lives as long as the connection: only what the copy and the closing log need.
  // Checks, authorization and the upstream connect run in establish (frame freed first).
  Tunnel t;
  auto guard = pod_.tracker.track([&] {
    stream->reset();
    if (t.upstream) t.upstream->reset();
  });
  if (!co_await establish(t, guard, *stream, *conn)) co_return;
  co_await copy_bidirectional(*stream, *t.upstream, t.counters->received, t.counters->sent, t.rec.moved);
  record_close(pod_.inputs.metrics, t.rec, std::move(t.closed_by_policy));
}

asio::awaitable<bool> Inbound::establish(Tunnel& t, ConnectionTracker::Guard& guard, h2::Stream& stream,
                                         const hbone::InboundConnection& conn) {
  auto opened = co_await open(t, guard, stream, conn);
  // open() read every request header it needs; a tunnel that lasts hours need not keep them.
  stream.release_headers();
  if (opened) co_return true;
  refuse(t, stream, std::move(opened.error()));
  co_return false;
}

asio::awaitable<std::expected<void, Inbound::Refusal>> Inbound::open(Tunnel& t, ConnectionTracker::Guard& guard,
                                                                     h2::Stream& stream,
                                                                     const hbone::InboundConnection& conn) {
  using Fail = std::unexpected<Refusal>;
  ConnectionRecord& rec = t.rec;
  rec.direction = "inbound";
  rec.src_addr = conn.peer.addr;
  TrafficLabels& labels = rec.draft_labels();
  labels.reporter = "destination";
  labels.connection_security_policy = "mutual_tls";
  labels.source_principal = conn.peer_identity.to_string();
  // The peer's trace id becomes our connection id in every log line: only a well-formed one.
  const auto traceparent = stream.header("traceparent");
  const auto trace_id = hbone::traceparent_trace_id(traceparent);
  rec.id = trace_id ? std::string(*trace_id) : pod_.next_trace_id().hex();
  if (!trace_id && !traceparent.empty()) pod_.inputs.metrics.on_invalid_traceparent();

  auto snapshot = pod_.inputs.state.load();
  label_inbound(pod_, *snapshot, conn.peer.ip(), labels);
  labels.destination_principal = pod_.pod->identity.to_string();
  // Every stream is counted once opened and once closed, rejected ones included.
  t.counters = pod_.inputs.metrics.on_open(labels);
  rec.share_labels(t.counters->labels);  // `labels` is gone from here on

  if (stream.header(":method") != "CONNECT") {
    co_return Fail(Refusal{400, {base::Errc::kProtocol, "method " + std::string(stream.header(":method")) + " is not CONNECT"}});
  }
  rec.dst_hbone_addr = std::string(stream.header(":authority"));
  auto target = hbone::parse_authority(rec.dst_hbone_addr);
  if (!target) co_return Fail(Refusal{400, {base::Errc::kProtocol, target.error().context}});
  if (!pod_.is_own_ip(target->ip())) {
    co_return Fail(Refusal{400, {base::Errc::kProtocol, "ip mismatch: authority " + rec.dst_hbone_addr + " is not this pod"}});
  }
  if (state::is_illegal_port(target->port())) {
    co_return Fail(Refusal{503, {base::Errc::kRecursiveCall, "attempted recursive call to ourselves: " + rec.dst_hbone_addr}});
  }
  rec.dst_addr = target->to_string();
  auto decision = authorize_inbound(pod_, *snapshot, conn.peer, conn.peer_identity, target->addr, rec.id);
  if (!decision.allowed) co_return Fail(Refusal{401, {base::Errc::kPolicyDenied, decision.reason}});
  guard.set_recheck(recheck_inbound(pod_, conn.peer, conn.peer_identity, target->addr, rec.id, t.closed_by_policy));
  const base::NextHop app{target->addr};
  // A stream the client already reset gets no upstream connection (rapid reset: the dial would
  // be work for the app that nobody waits for).
  if (stream.closed()) co_return Fail(Refusal{0, {base::Errc::kReset, "stream reset by the client before the upstream connect"}});
  auto connected = co_await pod_.connect_upstream(app, &conn.peer);
  if (!connected) co_return Fail(Refusal{503, std::move(connected.error())});
  t.upstream = std::make_unique<net::TcpStream>(std::move(*connected));
  if (auto ok = stream.respond(200); !ok) {
    t.upstream->reset();
    co_return Fail(Refusal{0, std::move(ok.error())});
  }
  co_return std::expected<void, Refusal>{};
}

void Inbound::refuse(Tunnel& t, h2::Stream& stream, Refusal refusal) {
  if (refusal.status != 0) {
    // Ignored: a stream the peer already closed cannot be answered; the refusal is recorded anyway.
    (void)stream.respond(refusal.status);
  }
  record_refusal(pod_.inputs.metrics, t.rec, std::move(refusal.error), t.counters.has_value());
}

}  // namespace meshnode::proxy
