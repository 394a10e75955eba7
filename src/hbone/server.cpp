#include "hbone/server.hpp"


#include <asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "net/awaitable.hpp"
#include "net/deadline.hpp"
#include "net/socket.hpp"
#include "tls/ossl.hpp"
#include "tls/verify.hpp"

namespace meshnode::hbone {

using base::Errc;
using base::fail;

asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> accept_hbone(
    asio::ip::tcp::socket socket, SSL_CTX* ctx, std::chrono::steady_clock::duration handshake_timeout,
    const h2::Settings& settings, StreamHandler handler, net::DrainScope& tasks,
    std::shared_ptr<PeerResetBudgets> budgets) {
  auto ex = socket.get_executor();
  auto info = std::make_shared<InboundConnection>();
  auto peer = net::peer_addr(socket.native_handle());
  auto local = net::local_addr(socket.native_handle());
  if (!peer || !local) co_return fail(Errc::kIo, "inbound HBONE socket has no addresses");
  info->peer = base::ClientAddr{*peer};
  info->local = *local;

  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) co_return fail(Errc::kTlsHandshake, "SSL_new: " + tls::openssl_errors());
  tls::TlsStream tls_socket(std::move(socket), ssl);
  net::Deadline deadline(ex, handshake_timeout, [&tls_socket] { tls_socket.close(); });
  auto handshake = co_await tls_socket.handshake(tls::TlsStream::Role::kServer);
  if (!handshake) {
    if (deadline.expired()) co_return fail(Errc::kTimeout, "TLS handshake from " + info->peer.to_string());
    std::string reason = tls::verify_failure_reason(tls_socket.native_handle());
    co_return fail(Errc::kTlsHandshake, "TLS handshake from " + info->peer.to_string() + ": " +
                                            (reason.empty() ? handshake.error().context : reason));
  }
  deadline.cancel();
  if (!tls_socket.negotiated_h2()) {
    co_return fail(Errc::kTlsHandshake, "client " + info->peer.to_string() + " did not negotiate ALPN h2");
  }
  auto identity = tls::peer_identity(tls_socket.native_handle());
  if (!identity) co_return std::unexpected(identity.error());
  info->peer_identity = *identity;
  if (budgets) {
    // A peer that exhausted its reset budget waits before each new connection is served: it can
    // no longer reconnect its way around the per-connection budget at full speed.
    if (auto delay = budgets->admission_delay(info->peer_identity); delay.count() > 0) {
      SPDLOG_DEBUG("hbone: {} over its reset budget, connection from {} waits {} ms", info->peer_identity.to_string(),
                   info->peer.to_string(), delay.count());
      asio::steady_timer wait(ex, delay);
      co_await wait.async_wait(net::kNoThrow);
    }
  }

  auto on_stream = [ex, info, &tasks, handler = std::move(handler)](std::shared_ptr<h2::Stream> stream) {
    std::string id = "hbone stream " + std::to_string(stream->id()) + " from " + info->peer.to_string();
    tasks.spawn(ex, handler(std::move(stream), info), std::move(id));
  };
  auto session = h2::Session::create(std::move(tls_socket), h2::Session::Role::kServer, settings, std::move(on_stream));
  if (!session) co_return std::unexpected(session.error());
  if (budgets) {
    (*session)->set_reset_charge([budgets, peer_identity = info->peer_identity] { return budgets->charge(peer_identity); });
  }
  (*session)->start(tasks);
  co_return *session;
}

}  // namespace meshnode::hbone
