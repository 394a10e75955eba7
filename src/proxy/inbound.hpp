#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <expected>
#include <memory>
#include <optional>

#include "base/error.hpp"
#include "h2/session.hpp"
#include "hbone/server.hpp"
#include "net/byte_stream.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/pod_context.hpp"
#include "proxy/tcp_metrics.hpp"
#include "proxy/tracker.hpp"

namespace meshnode::proxy {

/// The `reason` label of meshnode_inbound_handshake_failures_total for a failed inbound TLS setup:
/// "listener_limit" | "source_limit" (HandshakeLimiter), "timeout" (handshake deadline), "svid"
/// (not exactly one URI SAN, or not a SPIFFE ID), "trust_domain", "expired", "no_certificate",
/// "untrusted" (unknown issuer, revoked, bad signature), "alpn", "protocol" (TLS version, not
/// TLS), "other". Pure.
[[nodiscard]] std::string_view handshake_failure_reason(const base::Error& error);

/// The inbound HBONE path (15008, research §4.2): TLS 1.3 with the pod's certificate, then per
/// CONNECT stream: validate the authority, authorize, connect to the app, answer 200 only once the
/// app is reached, copy. 400 (not CONNECT, bad or foreign authority), 401 (policy), 503 (our own
/// port, app unreachable). Worker thread only.
class Inbound {
 public:
  explicit Inbound(PodContext& pod) : pod_(pod) {}

  /// One accepted connection: handshake and HTTP/2 session; each stream is then served as its own
  /// task in the data-path scope. `owner` (keeping the pod worker alive, and the connection's
  /// place in ProxyInputs::loads) is kept alive by the session's stream handler until the session
  /// ends, so streams outlive neither the paths nor the pool they use.
  asio::awaitable<void> serve(asio::ip::tcp::socket socket, TraceId id, std::shared_ptr<const void> owner);
  /// One CONNECT stream of an authenticated connection.
  asio::awaitable<void> serve_stream(std::shared_ptr<h2::Stream> stream,
                                     std::shared_ptr<const hbone::InboundConnection> conn);

 private:
  /// What a stream keeps while its bytes flow.
  struct Tunnel {
    ConnectionRecord rec;
    std::unique_ptr<net::TcpStream> upstream;
    std::optional<TcpMetrics::Handle> counters;
    std::optional<base::Error> closed_by_policy;  ///< set by the policy re-check
  };
  /// Why a stream is refused, and the status it is answered with (0: it is gone, answer nothing).
  struct Refusal {
    int status = 0;
    base::Error error;
  };

  /// open(), then frees the request headers; on failure answers and records the refusal.
  /// @returns whether the tunnel is open.
  asio::awaitable<bool> establish(Tunnel& t, ConnectionTracker::Guard& guard, h2::Stream& stream,
                                  const hbone::InboundConnection& conn);
  /// Validates the CONNECT, authorizes it, connects to the app and answers 200.
  asio::awaitable<std::expected<void, Refusal>> open(Tunnel& t, ConnectionTracker::Guard& guard, h2::Stream& stream,
                                                     const hbone::InboundConnection& conn);
  /// Answers and records a refused stream.
  void refuse(Tunnel& t, h2::Stream& stream, Refusal refusal);
  /// Counts a connection whose TLS/HTTP/2 setup failed (it never got a tunnel).
  void count_setup_failure(const base::Error& error, const base::Result<base::SocketAddr>& peer, TraceId id);

  PodContext& pod_;
};

}  // namespace meshnode::proxy
