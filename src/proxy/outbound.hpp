#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <memory>
#include <optional>

#include "base/address_roles.hpp"
#include "base/error.hpp"
#include "h2/session.hpp"
#include "net/byte_stream.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/pod_context.hpp"
#include "proxy/tcp_metrics.hpp"

namespace meshnode::proxy {

/// What an outbound connection keeps while its bytes flow (the connection-long frame holds only
/// this; routing and dialling run in Outbound::open, whose larger frame is freed first).
struct OutboundTunnel {
  ConnectionRecord rec;
  std::shared_ptr<h2::Stream> tunnel;           ///< HBONE route
  std::unique_ptr<net::TcpStream> plain;        ///< plain TCP or passthrough route
  std::optional<TcpMetrics::Handle> counters;   ///< set once the route is decided (counted opened)
  net::ByteStream* upstream = nullptr;          ///< tunnel or plain, once dialled

  /// Resets the upstream, if any (both directions end).
  void reset();
};

/// The outbound path (research §4.1): a connection the pod's app opened is routed by one pure
/// decision over the current snapshot (state::select_route) and carried over HBONE, plain TCP, or
/// passed through. Serves the captured listener (15001) itself; Socks5 (15080) reuses open, carry
/// and refuse. Worker thread only.
class Outbound {
 public:
  explicit Outbound(PodContext& pod) : pod_(pod) {}

  /// One connection captured on 15001 (its original destination from SO_ORIGINAL_DST). Reads the
  /// socket's addresses when called (a connection without them is reset and logged then); the
  /// returned task carries it.
  asio::awaitable<void> serve(asio::ip::tcp::socket socket, TraceId id);

  /// Routes `client` → `target` as the pod's workload and dials the route's next hop; fills `t`
  /// (record, labels, counters once routed, upstream once dialled). With `app`, an HBONE route
  /// whose peer takes early data (state::Route::early_data, ProxyOptions::hbone_early_data)
  /// takes what the app has already sent (up to kFirstDataBytes, without waiting) and sends it
  /// behind the CONNECT, counted as moved client → server.
  /// @returns the refusal reason: select_route's errors (kRecursiveCall, kNoHealthyUpstream) and
  ///          the dial's (kConnectFailed, kTimeout, kTlsHandshake, kIdentityMismatch,
  ///          kPolicyDenied from the peer's 401, ...). Nothing is logged or counted closed yet.
  asio::awaitable<base::Result<void>> open(OutboundTunnel& t, base::ClientAddr client, base::OrigDstAddr target,
                                           TraceId id, net::ByteStream* app = nullptr);
  /// The most an HBONE route sends behind its CONNECT (bytes): a client's first flight (an HTTP
  /// request head, a TLS ClientHello) fits; the rest goes on after the 200 as usual.
  static constexpr std::size_t kFirstDataBytes = 4096;
  /// Copies both directions until they end, then records the close (log line, metrics).
  asio::awaitable<void> carry(OutboundTunnel& t, net::TcpStream& downstream);
  /// Records a refused connection (one failed close, one log line). The caller has reset it.
  void refuse(OutboundTunnel& t, base::Error error);

 private:
  /// The captured connection's life. Its frame lives as long as the connection, so it holds only
  /// what the copy and the closing log need (GCC gives every local of a coroutine a frame slot).
  asio::awaitable<void> run(net::TcpStream downstream, base::ClientAddr client, base::OrigDstAddr target, TraceId id);
  /// open(), and on failure: resets both sides and records the refusal. @returns whether it opened.
  asio::awaitable<bool> establish(OutboundTunnel& t, net::TcpStream& downstream, base::ClientAddr client,
                                  base::OrigDstAddr target, TraceId id);
  /// Asks the control plane about `key` (on-demand mode): the snapshot that holds the answer, or
  /// the lookup's error (kNotFound: unknown to the control plane; kTimeout: not answered in time).
  asio::awaitable<base::Result<std::shared_ptr<const state::StateSnapshot>>> lookup_on_demand(std::string key);

  PodContext& pod_;
};

}  // namespace meshnode::proxy
