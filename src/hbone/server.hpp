#pragma once

#include <openssl/ssl.h>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "base/error.hpp"
#include "base/address_roles.hpp"
#include "base/ip.hpp"
#include "base/spiffe.hpp"
#include "h2/session.hpp"
#include "hbone/reset_budget.hpp"
#include "net/drain_scope.hpp"

namespace meshnode::hbone {

/// Facts about one accepted, authenticated HBONE connection, shared by all its streams.
struct InboundConnection {
  base::ClientAddr peer;        ///< TCP peer (the remote node proxy, i.e. the client pod IP)
  base::SocketAddr local;       ///< address the connection arrived on (this pod's IP:15008)
  base::SpiffeId peer_identity; ///< first URI SAN of the verified client certificate
};

/// Serves one CONNECT stream; runs as its own task (in the `tasks` given to accept_hbone) on the
/// connection's thread.
using StreamHandler =
    std::function<asio::awaitable<void>(std::shared_ptr<h2::Stream>, std::shared_ptr<const InboundConnection>)>;

/// Runs the server TLS handshake on an accepted socket with `ctx` (the pod identity's server
/// context: TLS 1.3, client certificate required, same trust domain) and starts HTTP/2 on it;
/// `handler` is spawned in `tasks` for every stream whose request headers are complete; the
/// session's own coroutines run there too (`tasks` must outlive them).
/// `budgets` (may be null) holds the reset budget of each peer identity: resets the connection
/// charges (h2::Settings::reset_burst) are charged there too, and a connection from an identity
/// whose budget is exhausted is served only after PeerResetBudgets::Limits::admission_delay.
/// @returns the running session (for drain and tracking); Errc::kTlsHandshake naming the peer and
///          the reason (no certificate, unknown root, other trust domain, no ALPN h2, plaintext),
///          Errc::kTimeout if the handshake takes longer than `handshake_timeout`.
asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> accept_hbone(
    asio::ip::tcp::socket socket, SSL_CTX* ctx, std::chrono::steady_clock::duration handshake_timeout,
    const h2::Settings& settings, StreamHandler handler, net::DrainScope& tasks,
    std::shared_ptr<PeerResetBudgets> budgets = nullptr);

}  // namespace meshnode::hbone
