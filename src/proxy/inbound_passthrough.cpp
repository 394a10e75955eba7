// Inbound plaintext (15006): connections that reach an enrolled pod without HBONE (research §4.3).
#include "proxy/inbound_passthrough.hpp"

#include <memory>
#include <optional>

#include "net/socket.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/copy.hpp"
#include "proxy/inbound_policy.hpp"
#include "state/route.hpp"

namespace meshnode::proxy {

asio::awaitable<void> InboundPassthrough::serve(asio::ip::tcp::socket socket, TraceId id) {
  ConnectionRecord rec;
  rec.direction = "inbound";
  rec.id = id.hex();
  rec.draft_labels().reporter = "destination";
  auto peer = net::peer_addr(socket.native_handle());
  auto orig = pod_.inputs.sockets.original_dst(socket.native_handle());
  net::TcpStream downstream(std::move(socket));
  std::unique_ptr<net::TcpStream> upstream;
  auto guard = pod_.tracker.track([&] {
    downstream.reset();
    if (upstream) upstream->reset();
  });
  if (!peer || !orig) {
    // One outcome per connection, always: this one is logged and counted too.
    downstream.reset();
    if (peer) rec.src_addr = *peer;
    base::Error why = !peer ? peer.error() : orig.error();
    why.context = std::string(!peer ? "inbound plaintext connection without a peer address: "
                                    : "inbound plaintext connection without an original destination: ") +
                  why.context;
    record_refusal(pod_.inputs.metrics, rec, std::move(why), /*opened=*/false);
    co_return;
  }
  const base::ClientAddr client{*peer};
  rec.src_addr = client.addr;
  rec.dst_addr = orig->to_string();
  auto snapshot = pod_.inputs.state.load();
  label_inbound(pod_, *snapshot, client.ip(), rec.draft_labels());
  auto counters = pod_.inputs.metrics.on_open(rec.labels());
  rec.share_labels(counters.labels);
  auto refuse = [&](base::Error error) {
    downstream.reset();
    record_refusal(pod_.inputs.metrics, rec, std::move(error), /*opened=*/true);
  };
  if (state::is_illegal_port(orig->port)) {
    refuse({base::Errc::kRecursiveCall, "attempted recursive call to ourselves: " + orig->to_string()});
    co_return;
  }
  // No peer identity on this path: a "require mTLS" policy (notPrincipals: [Presence]) denies it.
  auto decision = authorize_inbound(pod_, *snapshot, client, std::nullopt, *orig, rec.id);
  if (!decision.allowed) {
    refuse({base::Errc::kPolicyDenied, decision.reason});
    co_return;
  }
  std::optional<base::Error> closed_by_policy;
  guard.set_recheck(recheck_inbound(pod_, client, std::nullopt, *orig, rec.id, closed_by_policy));
  const base::NextHop app{*orig};
  auto connected = co_await pod_.connect_upstream(app, &client);
  if (!connected) {
    refuse(std::move(connected.error()));
    co_return;
  }
  upstream = std::make_unique<net::TcpStream>(std::move(*connected));
  co_await copy_bidirectional(downstream, *upstream, counters.received, counters.sent, rec.moved);
  record_close(pod_.inputs.metrics, rec, std::move(closed_by_policy));
}

}  // namespace meshnode::proxy
