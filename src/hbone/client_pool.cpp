#include "hbone/client_pool.hpp"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "hbone/identity.hpp"
#include "net/awaitable.hpp"
#include "net/deadline.hpp"
#include "net/socket.hpp"
#include "telemetry/metrics.hpp"
#include "tls/ossl.hpp"
#include "tls/verify.hpp"

namespace meshnode::hbone {
namespace {

using base::Errc;
using base::fail;
using net::kNoThrow;

asio::ip::tcp::endpoint to_endpoint(const base::SocketAddr& a) {
  std::error_code ec;
  return {asio::ip::make_address(a.ip.to_string(), ec), a.port};
}

}  // namespace

/// A dial in progress for one key; waiters park on `done` (cancel() wakes them all).
struct ClientPool::Pending {
  explicit Pending(const asio::any_io_executor& ex) : done(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer done;
  std::optional<base::Error> error;
};

ClientPool::ClientPool(asio::any_io_executor ex, std::shared_ptr<const base::Netns> netns, tls::IdentitySource& certs,
                       net::SocketFactory& sockets, net::DrainScope& tasks, Options options)
    : ex_(std::move(ex)),
      netns_(std::move(netns)),
      certs_(certs),
      sockets_(sockets),
      tasks_(tasks),
      options_(std::move(options)),
      sweep_(ex_) {}

ClientPool::~ClientPool() {
  alive_.reset();
  sweep_.cancel();
  close_all();
}

void ClientPool::arm_sweep() {
  if (sweep_armed_ || pool_.empty()) return;
  sweep_armed_ = true;
  sweep_.expires_after(std::min<std::chrono::steady_clock::duration>(options_.idle_release, std::chrono::seconds(10)));
  sweep_.async_wait([this, alive = std::weak_ptr<int>(alive_)](const std::error_code& ec) {
    // The pool may already be gone (cancelled, or queued before the destructor ran): touch nothing.
    if (ec == asio::error::operation_aborted || alive.expired()) return;
    sweep_armed_ = false;
    last_sweep_ = {};  // sweep now, whatever the connect-driven schedule says
    release_idle();
    arm_sweep();
  });
}

void ClientPool::close_all() {
  for (auto& [key, entries] : pool_) {
    for (auto& e : entries) e.session->abort("client pool closed");
  }
  pool_.clear();
}

void ClientPool::drain_all() {
  for (auto& [key, entries] : pool_) {
    for (auto& e : entries) e.session->drain();
  }
  pool_.clear();
}

std::size_t ClientPool::connection_count() const {
  std::size_t n = 0;
  for (const auto& [key, entries] : pool_) n += entries.size();
  return n;
}

std::shared_ptr<h2::Session> ClientPool::checkout(const PoolKey& key) {
  auto it = pool_.find(key);
  if (it == pool_.end()) return nullptr;
  auto& entries = it->second;
  std::erase_if(entries, [](const Entry& e) { return !e.session->alive(); });
  for (auto& e : entries) {
    std::uint32_t limit = std::min(options_.max_streams, e.session->peer_max_concurrent_streams());
    if (e.session->accepting() && e.session->active_streams() < limit) {
      e.last_checkout = std::chrono::steady_clock::now();
      return e.session;
    }
  }
  return nullptr;
}

std::optional<base::Error> ClientPool::dial_refusal(const PoolKey& key) const {
  auto it = pool_.find(key);
  if (it == pool_.end()) return std::nullopt;
  std::size_t live = 0;
  for (const auto& e : it->second) {
    if (!e.session->accepting()) continue;  // draining connections end by themselves
    ++live;
    // Another connection to the same peer would advertise the same: refuse instead of dialling.
    if (e.session->peer_max_concurrent_streams() == 0) {
      return base::Error{Errc::kLimitExceeded, "HBONE peer " + key.destination.to_string() +
                                                   " allows no stream (SETTINGS_MAX_CONCURRENT_STREAMS = 0)"};
    }
  }
  if (live < options_.max_connections) return std::nullopt;
  return base::Error{Errc::kLimitExceeded, "HBONE pool to " + key.destination.to_string() + " is full: " +
                                               std::to_string(live) + " connections, every stream in use"};
}

void ClientPool::release_idle() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_sweep_ < std::chrono::seconds(10)) return;
  last_sweep_ = now;
  for (auto it = pool_.begin(); it != pool_.end();) {
    std::erase_if(it->second, [&](const Entry& e) {
      if (!e.session->alive()) return true;
      if (now - e.last_checkout < options_.idle_release) return false;
      e.session->drain();
      return true;
    });
    it = it->second.empty() ? pool_.erase(it) : std::next(it);
  }
}

asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> ClientPool::acquire(const PoolKey& key) {
  for (;;) {
    if (auto session = checkout(key)) co_return session;
    if (auto it = pending_.find(key); it != pending_.end()) {
      auto pending = it->second;
      co_await pending->done.async_wait(kNoThrow);
      if (pending->error) co_return std::unexpected(*pending->error);
      continue;
    }
    if (auto refusal = dial_refusal(key)) co_return std::unexpected(std::move(*refusal));
    auto pending = std::make_shared<Pending>(ex_);
    pending_.emplace(key, pending);
    auto dialled = co_await dial(key);
    pending_.erase(key);
    if (!dialled) pending->error = dialled.error();
    pending->done.cancel();
    if (!dialled) co_return std::unexpected(dialled.error());
    pool_[key].push_back(Entry{*dialled, std::chrono::steady_clock::now()});
    arm_sweep();
  }
}

asio::awaitable<base::Result<std::shared_ptr<h2::Stream>>> ClientPool::connect(const PoolKey& key,
                                                                               const h2::Headers& headers,
                                                                               std::span<const std::byte> first) {
  release_idle();
  for (std::uint32_t attempt = 1;; ++attempt) {
    auto session = co_await acquire(key);
    if (!session) co_return std::unexpected(std::move(session.error()));
    auto stream = (*session)->open_stream(headers, first);
    if (!stream) co_return std::unexpected(stream.error());
    net::Deadline deadline(ex_, options_.response_timeout, [s = *stream] { s->reset(); });
    auto status = co_await (*stream)->wait_response();
    if (!status) {
      if (deadline.expired()) co_return fail(Errc::kTimeout, "no CONNECT response from " + key.destination.to_string());
      // The peer never saw this CONNECT: its GOAWAY crossed our HEADERS (a draining proxy, e.g.
      // the old one of a rollout), or it refused the stream. That connection takes no new stream
      // any more (checkout skips it after GOAWAY); send the CONNECT again on another one.
      if ((*stream)->refused() && attempt < options_.refused_attempts) {
        ++refused_retries_;
        if (options_.refused_retries != nullptr) options_.refused_retries->inc(1);
        SPDLOG_DEBUG("hbone: CONNECT to {} refused by the peer (attempt {}), retrying on another connection",
                     key.destination.to_string(), attempt);
        continue;
      }
      co_return std::unexpected(status.error());
    }
    if (*status == 401) {
      (*stream)->reset();
      co_return fail(Errc::kPolicyDenied, "CONNECT to " + key.destination.to_string() + " denied by the destination's policy (401)");
    }
    if (*status != 200) {
      (*stream)->reset();
      co_return fail(Errc::kProtocol, "CONNECT to " + key.destination.to_string() + " answered " +
                                          std::to_string(*status));
    }
    co_return *stream;
  }
}

asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> ClientPool::dial(const PoolKey& key) {
  auto identity = co_await acquire_identity(certs_, key.source, options_.connect_timeout);
  if (!identity) co_return std::unexpected(identity.error());
  auto dialable = sockets_.upstream(netns_.get(), key.destination.addr, options_.mark, nullptr);
  if (!dialable) co_return std::unexpected(dialable.error());

  auto endpoint = to_endpoint(dialable->address);
  asio::ip::tcp::socket tcp(ex_);
  std::error_code ec;
  tcp.assign(endpoint.protocol(), dialable->fd.release(), ec);
  if (ec) co_return fail(Errc::kIo, "assign socket", ec);
  SSL* ssl = SSL_new((*identity)->client_ctx.get());
  if (ssl == nullptr) co_return fail(Errc::kTlsHandshake, "SSL_new: " + tls::openssl_errors());
  tls::TlsStream tls_socket(std::move(tcp), ssl);

  net::Deadline deadline(ex_, options_.connect_timeout, [&tls_socket] { tls_socket.close(); });
  auto [cec] = co_await tls_socket.socket().async_connect(endpoint, kNoThrow);
  if (cec) {
    if (deadline.expired()) {
      co_return fail(Errc::kTimeout, "connection to " + key.destination.to_string() +
                                         " timed out, maybe a NetworkPolicy is blocking HBONE port 15008");
    }
    co_return fail(Errc::kConnectFailed, "connect to " + key.destination.to_string(), cec);
  }
  auto handshake = co_await tls_socket.handshake(tls::TlsStream::Role::kClient);
  if (!handshake) {
    if (deadline.expired()) co_return fail(Errc::kTimeout, "TLS handshake with " + key.destination.to_string());
    co_return fail(Errc::kTlsHandshake, "TLS handshake with " + key.destination.to_string() + ": " +
                                            handshake.error().context);
  }
  deadline.cancel();

  if (!tls_socket.negotiated_h2()) {
    co_return fail(Errc::kTlsHandshake, "peer " + key.destination.to_string() + " did not negotiate ALPN h2");
  }
  auto peer = tls::verify_server_identity(tls_socket.native_handle(), key.expected);
  if (!peer) co_return std::unexpected(peer.error());

  auto session = h2::Session::create(std::move(tls_socket), h2::Session::Role::kClient, options_.h2);
  if (!session) co_return std::unexpected(session.error());
  (*session)->start(tasks_);
  SPDLOG_DEBUG("hbone: connected to {} as {} (peer {})", key.destination.to_string(), key.source.to_string(),
               peer->to_string());
  co_return *session;
}

}  // namespace meshnode::hbone
