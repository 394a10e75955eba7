// Outbound: a connection captured in the pod (15001) or asked for over socks5 (15080) is routed by
// one pure decision over the current snapshot, then carried over HBONE, plain TCP, or passed
// through (research §4.1).
#include <spdlog/spdlog.h>

#include "hbone/headers.hpp"
#include "net/deadline.hpp"
#include "net/socket.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/copy.hpp"
#include "proxy/pod_worker.hpp"
#include "proxy/socks5.hpp"
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

socks5::Reply socks5_reply_for(const base::Error& error) {
  switch (error.code) {
    case base::Errc::kRecursiveCall:
    case base::Errc::kPolicyDenied: return socks5::Reply::kNotAllowed;
    case base::Errc::kConnectFailed: return socks5::Reply::kConnectionRefused;
    case base::Errc::kTimeout:
    case base::Errc::kNoHealthyUpstream: return socks5::Reply::kHostUnreachable;
    default: return socks5::Reply::kGeneralFailure;
  }
}

// Reads until `parse` reports a complete message or an error; the buffer keeps leftovers.
template <class Parse>
asio::awaitable<base::Result<std::size_t>> read_message(net::TcpStream& in, std::vector<std::byte>& buf, Parse parse) {
  for (;;) {
    auto parsed = parse(std::span<const std::byte>(buf));
    if (!parsed) co_return std::unexpected(parsed.error());
    if (parsed->value) co_return parsed->consumed;
    std::size_t have = buf.size();
    buf.resize(std::max(parsed->need, have + 1));
    auto n = co_await in.read_some(std::span(buf).subspan(have));
    if (!n) co_return std::unexpected(n.error());
    if (*n == 0) co_return base::fail(base::Errc::kProtocol, "socks5 client closed during negotiation");
    buf.resize(have + *n);
  }
}

// RFC 1928 negotiation: no-auth greeting, then one CONNECT to an IP address.
asio::awaitable<base::Result<base::SocketAddr>> socks5_negotiate(net::TcpStream& in) {
  std::vector<std::byte> buf;
  auto greeting_len = co_await read_message(in, buf, socks5::parse_greeting);
  if (!greeting_len) co_return std::unexpected(greeting_len.error());
  bool no_auth = *socks5::parse_greeting(buf)->value;
  std::array<std::byte, 2> choice{std::byte{socks5::kVersion},
                                  std::byte{no_auth ? socks5::kNoAuth : socks5::kNoAcceptableMethod}};
  if (auto w = co_await in.write_all(choice); !w) co_return std::unexpected(w.error());
  if (!no_auth) co_return base::fail(base::Errc::kProtocol, "socks5 client offered no 'no authentication' method");
  buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*greeting_len));
  auto request_len = co_await read_message(in, buf, socks5::parse_request);
  if (!request_len) co_return std::unexpected(request_len.error());
  auto request = *socks5::parse_request(buf)->value;
  socks5::Reply refusal = socks5::Reply::kSucceeded;
  std::string why;
  if (request.command != 1) {
    refusal = socks5::Reply::kCommandNotSupported;
    why = "socks5 command " + std::to_string(request.command) + " is not supported (CONNECT only)";
  } else if (!request.address) {
    refusal = socks5::Reply::kAddressTypeNotSupported;
    why = request.domain.empty() ? "socks5 address type " + std::to_string(request.address_type) + " is not supported"
                                 : "socks5 domain name '" + request.domain + "' is not supported (no DNS yet)";
  }
  if (refusal != socks5::Reply::kSucceeded) {
    co_await in.write_all(socks5::make_reply(refusal));
    co_return base::fail(base::Errc::kProtocol, why);
  }
  co_return *request.address;
}

}  // namespace

asio::awaitable<void> PodWorker::handle_outbound(asio::ip::tcp::socket socket) {
  auto self = shared_from_this();
  auto peer = net::peer_addr(socket.native_handle());
  auto orig = net::original_dst(socket.native_handle());
  net::TcpStream downstream(std::move(socket));
  if (!peer || !orig) {
    downstream.reset();
    spdlog::warn("access\tconnection failed\tdirection=outbound error=\"{}\"",
                 (peer ? orig.error() : peer.error()).message());
    co_return;
  }
  const base::ClientAddr client{*peer};
  const base::OrigDstAddr target{*orig};
  co_await serve_outbound(downstream, client, target, false);
}

asio::awaitable<void> PodWorker::handle_socks5(asio::ip::tcp::socket socket) {
  auto self = shared_from_this();
  auto peer = net::peer_addr(socket.native_handle());
  net::TcpStream downstream(std::move(socket));
  auto guard = tracker_.track([&] { downstream.reset(); });
  net::Deadline deadline(io_.get_executor(), shared_.options.connect_timeout, [&] { downstream.reset(); });
  auto target = co_await socks5_negotiate(downstream);
  deadline.cancel();
  if (!peer || !target) {
    downstream.reset();
    spdlog::warn("access\tconnection failed\tsrc.addr={} direction=outbound error=\"{}\"",
                 peer ? peer->to_string() : "-", (peer ? target.error() : peer.error()).message());
    co_return;
  }
  // The app dialled loopback; upstream, the connection comes from the pod's own address.
  base::ClientAddr client{*peer};
  if (!pod_->ips.empty()) client.addr.ip = pod_->ips.front();
  const base::OrigDstAddr orig_dst{*target};
  co_await serve_outbound(downstream, client, orig_dst, true);
}

asio::awaitable<void> PodWorker::serve_outbound(net::TcpStream& downstream, base::ClientAddr client,
                                                base::OrigDstAddr target, bool socks5_reply) {
  // This frame lives as long as the connection, so it holds only what the copy and the closing
  // log need; routing and dialling run in open_outbound, whose (much larger) frame is freed first.
  OutboundTunnel t;
  auto guard = tracker_.track([&] {
    downstream.reset();
    if (t.tunnel) t.tunnel->reset();
    if (t.plain) t.plain->reset();
  });
  auto opened = co_await open_outbound(t, downstream, client, target, socks5_reply);
  if (!opened) {
    if (socks5_reply) {
      const auto reply = socks5::make_reply(socks5_reply_for(opened.error()));
      // Ignored: the connection is refused and reset either way; the refusal below is its outcome.
      (void)co_await downstream.write_all(reply);
    }
    downstream.reset();
    if (t.upstream != nullptr) t.upstream->reset();
    refuse_outbound(t, std::move(opened.error()));
    co_return;
  }
  auto moved = co_await copy_bidirectional(downstream, *t.upstream, t.counters->received, t.counters->sent);
  finish_outbound(t.rec, moved);
}

void PodWorker::finish_outbound(ConnectionRecord& rec, Transferred& moved) {
  rec.bytes_recv = moved.downstream_to_upstream;
  rec.bytes_sent = moved.upstream_to_downstream;
  auto final_labels = rec.labels;
  final_labels.response_flags = response_flags_for(moved.error);
  shared_.metrics.on_close(final_labels, is_failure(moved.error));
  rec.error = std::move(moved.error);
  log_connection(rec);
}

void PodWorker::refuse_outbound(OutboundTunnel& t, base::Error error) {
  ConnectionRecord& rec = t.rec;
  if (!t.counters) shared_.metrics.on_open(rec.labels);
  auto final_labels = rec.labels;
  final_labels.response_flags = response_flags_for(error);
  shared_.metrics.on_close(final_labels, true);
  rec.error = std::move(error);
  log_connection(rec);
}

std::shared_ptr<const state::Workload> PodWorker::local_workload(const state::StateSnapshot& snapshot) const {
  if (auto workload = snapshot.workload_by_uid(pod_->uid)) return workload;
  return pod_->workload;
}

asio::awaitable<base::Result<void>> PodWorker::open_outbound(OutboundTunnel& t, net::TcpStream& downstream,
                                                             base::ClientAddr client, base::OrigDstAddr target,
                                                             bool socks5_reply) {
  ConnectionRecord& rec = t.rec;
  rec.direction = "outbound";
  // The trace id is both the connection id of the logs and the traceparent sent upstream.
  const std::uint64_t trace_hi = rng_();
  const std::uint64_t trace_lo = rng_();
  rec.id = fmt::format("{:016x}{:016x}", trace_hi, trace_lo);
  rec.labels.reporter = "source";
  rec.src_addr = client.addr;
  rec.dst_addr = target.to_string();

  auto snapshot = shared_.state.load();
  auto source = local_workload(*snapshot);
  set_source(rec.labels, *source);
  rec.labels.source_principal = source->identity().to_string();
  auto route = state::select_route(*snapshot, *source, target, rng_());
  if (!route) co_return std::unexpected(std::move(route.error()));
  rec.dst_addr = route->next_hop.to_string();
  if (route->destination) set_destination(rec.labels, *route->destination);
  if (route->service) {
    rec.dst_service = route->service->hostname;
    rec.labels.destination_service = route->service->hostname;
    rec.labels.destination_service_namespace = route->service->ns;
    rec.labels.destination_service_name = route->service->name;
  }
  if (route->kind == state::Route::Kind::kHbone) {
    rec.dst_hbone_addr = route->hbone_target.to_string();
    rec.labels.connection_security_policy = "mutual_tls";
    rec.labels.destination_principal = route->destination->identity().to_string();
  }
  // Counted as opened once the route is decided, before dialling (as ztunnel does).
  t.counters = shared_.metrics.on_open(rec.labels);

  if (route->kind == state::Route::Kind::kHbone) {
    hbone::ConnectInfo info{route->hbone_target, client, rec.dst_service, baggage_of(*source),
                            hbone::make_traceparent(trace_hi, trace_lo, rng_())};
    hbone::PoolKey key{source->identity(), route->expected_identities, route->next_hop, client.ip()};
    const h2::Headers headers = hbone::connect_headers(info);
    auto stream = co_await pool_.connect(key, headers);
    if (!stream) co_return std::unexpected(std::move(stream.error()));
    t.tunnel = *stream;
    t.upstream = t.tunnel.get();
  } else {
    auto connected = co_await connect_upstream(route->next_hop);
    if (!connected) co_return std::unexpected(std::move(connected.error()));
    t.plain = std::make_unique<net::TcpStream>(std::move(*connected));
    t.upstream = t.plain.get();
  }
  if (socks5_reply) {
    const auto reply = socks5::make_reply(socks5::Reply::kSucceeded);
    auto written = co_await downstream.write_all(reply);
    if (!written) co_return std::unexpected(std::move(written.error()));
  }
  co_return base::Result<void>{};
}

}  // namespace meshnode::proxy
