#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "base/address_roles.hpp"
#include "base/ip.hpp"
#include "base/netns.hpp"
#include "base/spiffe.hpp"
#include "h2/session.hpp"
#include "net/drain_scope.hpp"
#include "net/socket_factory.hpp"
#include "tls/cert_manager.hpp"

namespace meshnode::hbone {

/// What makes two outbound HBONE connections interchangeable (research §2.1 pooling):
/// the identity we present, the identities we accept, where we dial, and our source IP.
struct PoolKey {
  base::SpiffeId source;
  std::vector<base::SpiffeId> expected;  ///< peer must present one of these URI SANs
  base::NextHop destination;             ///< podIP:15008
  base::IpAddr source_ip;
  friend auto operator<=>(const PoolKey&, const PoolKey&) = default;
  friend bool operator==(const PoolKey&, const PoolKey&) = default;
};

/// Pooled HBONE client for one pod on one worker thread: multiplexes CONNECT streams over mTLS
/// HTTP/2 connections, up to `max_streams` per connection (and the peer's limit), dialling a new
/// connection when all are full, up to `max_connections` per key (issue 11 defect 5: a peer
/// advertising SETTINGS_MAX_CONCURRENT_STREAMS = 0 made it dial once per outbound connection). Concurrent requests for a key without a connection wait for one
/// dial instead of each dialling. A connection not checked out for `idle_release` is released:
/// it gets GOAWAY and closes when its last stream ends. Single-threaded (its executor's thread).
class ClientPool {
 public:
  struct Options {
    std::chrono::steady_clock::duration connect_timeout = std::chrono::seconds(10);  ///< TCP + TLS
    std::chrono::steady_clock::duration response_timeout = std::chrono::seconds(10); ///< CONNECT → :status
    std::uint32_t max_streams = 100;
    /// Live connections per key; when all are full a connect fails with Errc::kLimitExceeded.
    /// 64 × 100 streams per key per worker is far above what one pod opens to one destination.
    std::uint32_t max_connections = 64;
    std::chrono::steady_clock::duration idle_release = std::chrono::minutes(5);
    /// Attempts of one CONNECT the peer refused unprocessed (REFUSED_STREAM, or its GOAWAY's
    /// last-stream-id below our stream): each retry goes to a connection still taking streams (never
    /// one that has had GOAWAY), dialled afresh if none is left.
    std::uint32_t refused_attempts = 3;
    /// Counts those retries (may be null; must outlive the pool).
    telemetry::Counter* refused_retries = nullptr;
    std::uint32_t mark = 0x539;  ///< SO_MARK of the sockets we dial
    h2::Settings h2;
  };

  /// @param netns   namespace the sockets are created in (the pod's); null = the caller's.
  /// @param sockets where sockets come from (net::InPodSockets in production); must outlive the pool.
  /// @param tasks   scope the connections' coroutines run in; must outlive the pool's sessions.
  ClientPool(asio::any_io_executor ex, std::shared_ptr<const base::Netns> netns, tls::IdentitySource& certs,
             net::SocketFactory& sockets, net::DrainScope& tasks, Options options);
  ~ClientPool();
  ClientPool(const ClientPool&) = delete;
  ClientPool& operator=(const ClientPool&) = delete;

  /// Opens a CONNECT stream to `key.destination` with `headers` and returns it once the peer
  /// answered 200. `first`: bytes the app already sent, carried as the stream's first DATA right
  /// behind the CONNECT HEADERS (RFC 9113 §8.5: every DATA frame after the request HEADERS is
  /// tunnel payload), so they reach the destination one round trip earlier; the peer holds them
  /// until its upstream is connected and authorized, and drops them with any refusal. At most
  /// 16 KiB; the buffer must stay valid until this returns (a refused stream is retried with
  /// the same bytes). Errors: Errc::kConnectFailed / kTimeout (dial), kTlsHandshake, kIdentityMismatch
  /// (peer SAN not in key.expected), kCertificate (no certificate for key.source), kProtocol
  /// (non-200 status, named in the context), kReset (connection lost, or the stream refused
  /// unprocessed `refused_attempts` times in a row: each refusal is retried on another connection),
  /// kLimitExceeded (the key has `max_connections` full connections, or its peer allows no stream:
  /// SETTINGS_MAX_CONCURRENT_STREAMS = 0 — no further connection is dialled to such a peer).
  asio::awaitable<base::Result<std::shared_ptr<h2::Stream>>> connect(const PoolKey& key, const h2::Headers& headers,
                                                                     std::span<const std::byte> first = {});

  /// Aborts every pooled connection (their streams see resets).
  void close_all();
  /// Graceful: every pooled connection gets GOAWAY and closes once its streams have ended; new
  /// connects dial afresh. Used when the pod drains.
  void drain_all();
  /// Number of live pooled connections (for tests and /config_dump).
  [[nodiscard]] std::size_t connection_count() const;
  /// CONNECTs sent again because the peer refused them unprocessed (since construction).
  [[nodiscard]] std::uint64_t refused_retries() const noexcept { return refused_retries_; }

 private:
  struct Entry {
    std::shared_ptr<h2::Session> session;
    std::chrono::steady_clock::time_point last_checkout;
  };
  struct Pending;

  asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> dial(const PoolKey& key);
  /// A connection of `key` that can take one more stream now: pooled, or dialled (waiting for a
  /// dial already in progress for the key instead of dialling twice).
  asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> acquire(const PoolKey& key);
  std::shared_ptr<h2::Session> checkout(const PoolKey& key);
  /// Why no connection of `key` can take a stream and none may be dialled; nullopt if one may.
  std::optional<base::Error> dial_refusal(const PoolKey& key) const;
  void release_idle();
  /// Keeps a sweep timer armed while the pool holds connections: without it an idle pool (no
  /// further connect) would keep its connections, and their fds, forever.
  void arm_sweep();

  asio::any_io_executor ex_;
  std::shared_ptr<const base::Netns> netns_;
  tls::IdentitySource& certs_;
  net::SocketFactory& sockets_;
  net::DrainScope& tasks_;
  Options options_;
  std::map<PoolKey, std::vector<Entry>> pool_;
  std::map<PoolKey, std::shared_ptr<Pending>> pending_;
  std::chrono::steady_clock::time_point last_sweep_ = std::chrono::steady_clock::now();
  asio::steady_timer sweep_;
  bool sweep_armed_ = false;
  std::uint64_t refused_retries_ = 0;
  /// Expires with the pool: a sweep handler already queued when the pool is destroyed sees it gone.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace meshnode::hbone
