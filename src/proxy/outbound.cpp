// Outbound: a connection captured in the pod (15001), or asked for over socks5 (15080), is routed
// by one pure decision over the current snapshot, then carried over HBONE, plain TCP, or passed
// through (research §4.1).
#include "proxy/outbound.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <span>
#include <vector>

#include "hbone/headers.hpp"
#include "net/await_callback.hpp"
#include "net/awaitable.hpp"
#include "net/socket.hpp"
#include "proxy/copy.hpp"
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

// Takes what `app` has already sent, without waiting: nothing (no allocation) when it has sent
// nothing yet, or EOF or an error is pending (the copy reads those). On the heap: the bytes wait
// in open()'s frame across the dial, and a frame slot of kFirstDataBytes would be paid by every
// connection.
std::vector<std::byte> take_first_data(net::ByteStream& app) {
  std::array<std::byte, Outbound::kFirstDataBytes> probe;
  const std::size_t n = app.read_now(probe);
  return {probe.begin(), probe.begin() + static_cast<std::ptrdiff_t>(n)};
}

// The labels and record fields a decided route gives the connection.
void describe_route(ConnectionRecord& rec, const state::Route& route) {
  rec.dst_addr = route.next_hop.to_string();
  TrafficLabels& labels = rec.draft_labels();
  if (route.destination) set_destination(labels, *route.destination);
  if (route.service) {
    rec.dst_service = route.service->hostname;
    labels.destination_service = route.service->hostname;
    labels.destination_service_namespace = route.service->ns;
    labels.destination_service_name = route.service->name;
  }
  if (route.kind == state::Route::Kind::kHbone) {
    rec.dst_hbone_addr = route.hbone_target.to_string();
    labels.connection_security_policy = "mutual_tls";
    labels.destination_principal = route.destination->identity().to_string();
  }
}

}  // namespace

void OutboundTunnel::reset() {
  if (tunnel) tunnel->reset();
  if (plain) plain->reset();
}

asio::awaitable<void> Outbound::serve(asio::ip::tcp::socket socket, TraceId id) {
  // Not a coroutine: these locals stay out of the connection's frame.
  auto peer = net::peer_addr(socket.native_handle());
  auto orig = pod_.inputs.sockets.original_dst(socket.native_handle());
  net::TcpStream downstream(std::move(socket));
  if (!peer || !orig) {
    downstream.reset();
    spdlog::warn("access\tconnection failed\tid={} direction=outbound error=\"{}\"", id.hex(),
                 (peer ? orig.error() : peer.error()).message());
    return net::ready_now();
  }
  return run(std::move(downstream), base::ClientAddr{*peer}, base::OrigDstAddr{*orig}, id);
}

asio::awaitable<void> Outbound::run(net::TcpStream downstream, base::ClientAddr client, base::OrigDstAddr target,
                                    TraceId id) {
  OutboundTunnel t;
  auto guard = pod_.tracker.track([&] {
    downstream.reset();
    t.reset();
  });
  if (!co_await establish(t, downstream, client, target, id)) co_return;
  // carry()'s two lines, inline: its frame would be one more per connection.
  co_await copy_bidirectional(downstream, *t.upstream, t.counters->received, t.counters->sent, t.rec.moved);
  record_close(pod_.inputs.metrics, t.rec);
}

asio::awaitable<bool> Outbound::establish(OutboundTunnel& t, net::TcpStream& downstream, base::ClientAddr client,
                                          base::OrigDstAddr target, TraceId id) {
  auto opened = co_await open(t, client, target, id, &downstream);
  if (opened) co_return true;
  downstream.reset();
  t.reset();
  refuse(t, std::move(opened.error()));
  co_return false;
}

asio::awaitable<base::Result<std::shared_ptr<const state::StateSnapshot>>> Outbound::lookup_on_demand(std::string key) {
  using Answer = base::Result<std::shared_ptr<const state::StateSnapshot>>;
  const auto timeout = pod_.inputs.options.on_demand_timeout;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto* lookup = pod_.inputs.on_demand;
  // The lookup itself answers kTimeout at the deadline; the extra second only guards against a
  // lookup that never answers.
  auto answer = co_await net::await_callback<Answer>(
      timeout + std::chrono::seconds(1),
      [&](std::function<void(Answer)> reply) { lookup->lookup(key, deadline, std::move(reply)); });
  if (!answer) co_return base::fail(base::Errc::kTimeout, "xDS on-demand lookup of '" + key + "' never answered");
  if (!*answer) SPDLOG_DEBUG("on-demand lookup of '{}': {}", key, answer->error().message());
  co_return std::move(*answer);
}

asio::awaitable<base::Result<void>> Outbound::open(OutboundTunnel& t, base::ClientAddr client,
                                                   base::OrigDstAddr target, TraceId id, net::ByteStream* app) {
  ConnectionRecord& rec = t.rec;
  rec.direction = "outbound";
  rec.id = id.hex();
  rec.draft_labels().reporter = "source";
  rec.src_addr = client.addr;
  rec.dst_addr = target.to_string();

  auto snapshot = pod_.inputs.state.load();
  auto source = pod_.local_workload(*snapshot);
  set_source(rec.draft_labels(), *source);
  rec.draft_labels().source_principal = source->identity().to_string();
  auto route = state::select_route(*snapshot, *source, target, pod_.random());
  // On-demand mode: an address no snapshot knows is asked for first; the connection waits for the
  // answer (bounded) and is routed on the snapshot that holds it. "Unknown to the control plane"
  // stays passthrough; no answer in time fails the connection with the lookup's reason.
  std::shared_ptr<const state::StateSnapshot> answered;
  if (route && route->kind == state::Route::Kind::kPassthrough && pod_.inputs.on_demand != nullptr) {
    auto looked_up = co_await lookup_on_demand(source->network + "/" + target.ip().to_string());
    if (looked_up) {
      answered = std::move(*looked_up);
      route = state::select_route(*answered, *source, target, pod_.random());
    } else if (looked_up.error().code != base::Errc::kNotFound) {
      co_return std::unexpected(std::move(looked_up.error()));
    }
  }
  if (!route) co_return std::unexpected(std::move(route.error()));
  describe_route(rec, *route);
  // Counted as opened once the route is decided, before dialling (as ztunnel does).
  t.counters = pod_.inputs.metrics.on_open(rec.labels());
  rec.share_labels(t.counters->labels);

  if (route->kind == state::Route::Kind::kHbone) {
    // The connection id is the trace id of the traceparent, so both ends log the same id.
    const hbone::ConnectInfo info{route->hbone_target, client, rec.dst_service, baggage_of(*source),
                                  hbone::make_traceparent(id.hi, id.lo, pod_.random())};
    const hbone::PoolKey key{source->identity(), route->expected_identities, route->next_hop, client.ip()};
    const h2::Headers headers = hbone::connect_headers(info);
    // What the app sent already (an HTTP request, a ClientHello) rides behind the CONNECT: one
    // TLS record instead of two, and at the destination one round trip sooner.
    const bool early = app != nullptr && route->early_data && pod_.inputs.options.hbone_early_data;
    const std::vector<std::byte> first = early ? take_first_data(*app) : std::vector<std::byte>{};
    const std::span<const std::byte> first_bytes = first;
    auto stream = co_await pod_.pool.connect(key, headers, first_bytes);
    if (!stream) co_return std::unexpected(std::move(stream.error()));
    t.tunnel = std::move(*stream);
    t.upstream = t.tunnel.get();
    if (!first.empty()) {
      t.rec.moved.downstream_to_upstream += first.size();
      if (t.counters->received != nullptr) t.counters->received->inc(first.size());
    }
  } else {
    auto connected = co_await pod_.connect_upstream(route->next_hop);
    if (!connected) co_return std::unexpected(std::move(connected.error()));
    t.plain = std::make_unique<net::TcpStream>(std::move(*connected));
    t.upstream = t.plain.get();
  }
  co_return base::Result<void>{};
}

asio::awaitable<void> Outbound::carry(OutboundTunnel& t, net::TcpStream& downstream) {
  co_await copy_bidirectional(downstream, *t.upstream, t.counters->received, t.counters->sent, t.rec.moved);
  record_close(pod_.inputs.metrics, t.rec);
}

void Outbound::refuse(OutboundTunnel& t, base::Error error) {
  record_refusal(pod_.inputs.metrics, t.rec, std::move(error), t.counters.has_value());
}

}  // namespace meshnode::proxy
