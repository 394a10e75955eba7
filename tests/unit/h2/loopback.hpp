#pragma once

// A real HBONE peer pair on one io_context in the test thread: an mTLS HTTP/2 server on
// 127.0.0.1:<ephemeral> built with hbone::accept_hbone, and an hbone::ClientPool dialling it.
// Certificates come from a tls::LocalCa in a temp dir. The server's stream handler is chosen per
// stream by request headers (x-mode, x-tag, x-size, x-seed), so each test states what the
// server does next to what the client does.

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "hbone/client_pool.hpp"
#include "hbone/headers.hpp"
#include "hbone/server.hpp"
#include "net/awaitable.hpp"
#include "net/drain_scope.hpp"
#include "net/socket_factory.hpp"
#include "tls/cert_manager.hpp"
#include "tls/local_ca.hpp"
#include "unit/tls/tls_test_util.hpp"

namespace meshnode::testing {

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

inline const base::SpiffeId kClientId{"cluster.local", "default", "client"};
inline const base::SpiffeId kServerId{"cluster.local", "default", "server"};

/// ASSERT for coroutine bodies (gtest's ASSERT_* use `return`): fails and leaves the coroutine.
#define CO_ASSERT(cond, ...)                                                   \
  if (!(cond)) {                                                               \
    ADD_FAILURE() << "assertion failed: " #cond " " __VA_OPT__(<< __VA_ARGS__); \
    co_return;                                                                 \
  }

/// `n` pseudo-random bytes, the same for the same seed.
inline Bytes random_bytes(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  Bytes out(n);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t v = rng();
    for (std::size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<std::byte>(v >> (8 * j));
  }
  return out;
}

inline std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

/// Reads until EOF (the bytes) or the first error.
inline asio::awaitable<base::Result<Bytes>> read_to_eof(net::ByteStream& s) {
  Bytes out;
  Bytes buf(64 * 1024);
  for (;;) {
    auto n = co_await s.read_some(buf);
    if (!n) co_return std::unexpected(n.error());
    if (*n == 0) co_return out;
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
  }
}

/// Reads exactly `n` bytes; Errc::kClosed if EOF comes first.
inline asio::awaitable<base::Result<Bytes>> read_exactly(net::ByteStream& s, std::size_t n) {
  Bytes out(n);
  std::size_t got = 0;
  while (got < n) {
    const auto rest = std::span(out).subspan(got);
    auto r = co_await s.read_some(rest);
    if (!r) co_return std::unexpected(r.error());
    if (*r == 0) co_return base::fail(base::Errc::kClosed, "EOF after " + std::to_string(got) + " bytes");
    got += *r;
  }
  co_return out;
}

/// Writes `data` in chunks of `chunk` bytes (several write_all calls, as a copy loop does), then
/// sends EOF.
inline asio::awaitable<base::Result<void>> write_and_close(net::ByteStream& s, std::span<const std::byte> data,
                                                          std::size_t chunk = 64 * 1024) {
  while (!data.empty()) {
    auto part = data.first(std::min(chunk, data.size()));
    auto w = co_await s.write_all(part);
    if (!w) co_return w;
    data = data.subspan(part.size());
  }
  co_return co_await s.shutdown_write();
}

/// Reads `s` to EOF while writing `data` to it (then EOF), both at once.
inline asio::awaitable<std::tuple<base::Result<Bytes>, base::Result<void>>> read_and_write(
    net::ByteStream& s, std::span<const std::byte> data, std::size_t chunk = 64 * 1024) {
  using namespace asio::experimental::awaitable_operators;
  // Named first, awaited second (STYLE: no temporary inside a co_await expression).
  auto reader = read_to_eof(s);
  auto writer = write_and_close(s, data, chunk);
  auto both = std::move(reader) && std::move(writer);
  co_return co_await std::move(both);
}

/// Copies `s` back to itself until EOF, then half-closes; returns bytes echoed.
inline asio::awaitable<base::Result<std::size_t>> echo(net::ByteStream& s) {
  Bytes buf(64 * 1024);
  std::size_t total = 0;
  for (;;) {
    auto n = co_await s.read_some(buf);
    if (!n) co_return std::unexpected(n.error());
    if (*n == 0) break;
    const auto filled = std::span(buf).first(*n);
    auto w = co_await s.write_all(filled);
    if (!w) co_return std::unexpected(w.error());
    total += *n;
  }
  auto sh = co_await s.shutdown_write();
  if (!sh) co_return std::unexpected(sh.error());
  co_return total;
}

/// Polls `pred` every 2 ms until it holds or `limit` passes; returns its last value.
inline asio::awaitable<bool> wait_until(std::function<bool()> pred, std::chrono::steady_clock::duration limit = 10s) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer t(ex);
  auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) co_return false;
    t.expires_after(2ms);
    co_await t.async_wait(net::kNoThrow);
  }
  co_return true;
}

/// What the server side of one stream saw, by x-tag.
struct ServerStreamRecord {
  bool done = false;
  base::Result<Bytes> received = Bytes{};  // bytes read until EOF, or the read error
  base::Result<void> sent;                 // outcome of the server's writes
  std::string authority;
  std::string forwarded;
  base::SpiffeId peer_identity;
};

class HboneLoopback {
 public:
  HboneLoopback() {
    certs_ = tls::testing::cert_manager_in(dir_);
    auto server = certs_->get(kServerId);
    if (!server) throw std::runtime_error(server.error().message());
    server_tls_ = *server;
    asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    options_.mark = 0;  // SO_MARK needs CAP_NET_ADMIN; the mark is covered by the net tests
    options_.connect_timeout = 5s;
    options_.response_timeout = 5s;
    asio::co_spawn(io_, accept_loop(), asio::detached);
  }
  ~HboneLoopback() {
    shutdown();
    // Sessions own sockets and timers of io_: release them while io_ still exists.
    sessions.clear();
    client_sessions_.clear();
    pool_.reset();
  }
  HboneLoopback(const HboneLoopback&) = delete;
  HboneLoopback& operator=(const HboneLoopback&) = delete;

  asio::io_context& io() { return io_; }
  tls::CertManager& certs() { return *certs_; }
  std::uint16_t port() const { return port_; }
  hbone::ClientPool::Options& options() { return options_; }

  /// The pool, created on first use with the current options().
  hbone::ClientPool& pool() {
    if (!pool_) pool_ = std::make_unique<hbone::ClientPool>(io_.get_executor(), nullptr, *certs_, sockets_, tasks_, options_);
    return *pool_;
  }

  hbone::PoolKey key(std::vector<base::SpiffeId> expected = {kServerId}) const {
    return hbone::PoolKey{kClientId, std::move(expected),
                          base::NextHop{base::SocketAddr{base::IpAddr::v4({127, 0, 0, 1}), port_}},
                          base::IpAddr::v4({127, 0, 0, 1})};
  }

  /// CONNECT headers for a stream the server serves in `mode` (see serve_stream).
  h2::Headers headers(std::string_view mode, std::string_view tag = "", std::size_t size = 0,
                      std::uint64_t seed = 0) const {
    hbone::ConnectInfo info{base::HboneTarget{base::SocketAddr{base::IpAddr::v4({127, 0, 0, 1}), 8080}},
                            base::ClientAddr{base::SocketAddr{base::IpAddr::v4({10, 0, 0, 1}), 43210}},
                            "echo.default.svc.cluster.local",
                            "", hbone::make_traceparent(1, 2, 3)};
    auto h = hbone::connect_headers(info);
    h.push_back({"x-mode", std::string(mode)});
    h.push_back({"x-tag", std::string(tag)});
    h.push_back({"x-size", std::to_string(size)});
    h.push_back({"x-seed", std::to_string(seed)});
    return h;
  }

  /// Opens a CONNECT stream through the pool. (ClientPool::connect takes references: the key and
  /// headers live in this coroutine's frame until it completes.)
  asio::awaitable<base::Result<std::shared_ptr<h2::Stream>>> connect_with(h2::Headers h, hbone::PoolKey k,
                                                                          std::span<const std::byte> first = {}) {
    co_return co_await pool().connect(k, h, first);
  }
  /// Not a coroutine: the headers are built before it returns, so its arguments may be literals.
  /// `first`: bytes sent behind the CONNECT (ClientPool::connect); must outlive the await.
  asio::awaitable<base::Result<std::shared_ptr<h2::Stream>>> connect(std::string_view mode, std::string_view tag = "",
                                                                    std::size_t size = 0, std::uint64_t seed = 0,
                                                                    std::span<const std::byte> first = {}) {
    return connect_with(headers(mode, tag, size, seed), key(), first);
  }

  /// A client HTTP/2 session of its own (outside the pool), for tests that drive streams directly
  /// (early data, many refused streams). Started in the loopback's task scope.
  asio::awaitable<base::Result<std::shared_ptr<h2::Session>>> dial_session(h2::Settings settings = {}) {
    auto identity = certs_->get(kClientId);
    if (!identity) co_return std::unexpected(identity.error());
    asio::ip::tcp::socket tcp(io_);
    const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port_);
    auto [ec] = co_await tcp.async_connect(server, net::kNoThrow);
    if (ec) co_return base::fail(base::Errc::kConnectFailed, "connect", ec);
    tls::TlsStream tls_socket(std::move(tcp), SSL_new((*identity)->client_ctx.get()));
    auto handshake = co_await tls_socket.handshake(tls::TlsStream::Role::kClient);
    if (!handshake) co_return std::unexpected(handshake.error());
    auto session = h2::Session::create(std::move(tls_socket), h2::Session::Role::kClient, settings);
    if (!session) co_return std::unexpected(session.error());
    (*session)->start(tasks_);
    client_sessions_.push_back(*session);
    co_return *session;
  }

  /// Runs `body` (a named coroutine over this loopback) on the io_context until it finishes;
  /// fails the test if it takes longer than `limit`. Then closes everything and lets the
  /// remaining coroutines unwind.
  void run(asio::awaitable<void> body, std::chrono::steady_clock::duration limit = 20s) {
    bool done = false;
    std::exception_ptr error;
    asio::co_spawn(io_, std::move(body), [&](std::exception_ptr e) {
      error = e;
      done = true;
    });
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done && std::chrono::steady_clock::now() < until) {
      if (io_.stopped()) io_.restart();
      io_.run_one_for(100ms);
    }
    EXPECT_TRUE(done) << "test body did not finish within its time limit";
    shutdown();
    if (done) {
      // The body may still be suspended after a timeout; only then is `error` not final.
      if (error) std::rethrow_exception(error);
    }
  }

  // Server-side observations.
  std::map<std::string, ServerStreamRecord> records;  ///< by x-tag
  std::vector<base::Error> accept_errors;             ///< accept_hbone failures, in order
  std::vector<std::shared_ptr<h2::Session>> sessions; ///< accepted sessions, in order
  int streams_served = 0;                             ///< handler invocations
  /// Reset budgets per client identity handed to accept_hbone (replace before the first accept).
  std::shared_ptr<hbone::PeerResetBudgets> budgets = std::make_shared<hbone::PeerResetBudgets>();
  /// HTTP/2 settings of the server sessions (change before the first accept).
  h2::Settings server_settings;

  std::size_t accepted() const { return accept_errors.size() + sessions.size(); }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(net::kNoThrow);
      if (ec) co_return;
      asio::co_spawn(io_, accept_one(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> accept_one(asio::ip::tcp::socket socket) {
    hbone::StreamHandler handler = [this](std::shared_ptr<h2::Stream> s,
                                          std::shared_ptr<const hbone::InboundConnection> c) {
      return serve_stream(std::move(s), std::move(c));
    };
    SSL_CTX* const ctx = server_tls_->server_ctx.get();
    constexpr std::chrono::steady_clock::duration kHandshake = 5s;
    auto session = co_await hbone::accept_hbone(std::move(socket), ctx, kHandshake, server_settings, std::move(handler),
                                                tasks_, budgets);
    if (session) {
      sessions.push_back(*session);
    } else {
      accept_errors.push_back(session.error());
    }
  }

  // x-mode:
  //   echo      200, copy back until EOF, half-close
  //   exchange  200, concurrently: read to EOF (recorded) and send random(x-seed, x-size) + EOF
  //   source    200, send random(x-seed, x-size) + EOF, never read
  //   first     200, send random(x-seed, x-size) before reading, then read to EOF (recorded),
  //             send those bytes back, EOF
  //   halfclose 200, read to EOF (recorded), then send random(x-seed, x-size) + EOF
  //   reset     200, send random(x-seed, x-size) in 16 KiB writes, then reset the stream
  //   sink      200, read until EOF or error (recorded)
  //   status    respond x-size as the status code
  //   early     read x-size bytes before answering (recorded; only bytes sent with the CONNECT
  //             can come), 200, read to EOF (appended), half-close
  //   rst       200, send random(x-seed, x-size), then RST_STREAM with code x-seed (no END_STREAM)
  asio::awaitable<void> serve_stream(std::shared_ptr<h2::Stream> stream,
                                     std::shared_ptr<const hbone::InboundConnection> conn) {
    ++streams_served;
    std::string mode(stream->header("x-mode"));
    std::string tag(stream->header("x-tag"));
    std::size_t size = std::stoull(std::string(stream->header("x-size")));
    std::uint64_t seed = std::stoull(std::string(stream->header("x-seed")));
    auto& rec = records[tag];
    rec.authority = stream->header(":authority");
    rec.forwarded = stream->header("forwarded");
    rec.peer_identity = conn->peer_identity;

    if (mode == "status") {
      (void)stream->respond(static_cast<int>(size));
      rec.done = true;
      co_return;
    }
    if (mode == "early") {
      // Only bytes that came with the CONNECT can arrive before the answer.
      rec.received = co_await read_exactly(*stream, size);
      if (auto ok = stream->respond(rec.received ? 200 : 503); !ok) rec.sent = std::unexpected(ok.error());
      if (rec.received && rec.sent) {
        auto rest = co_await read_to_eof(*stream);
        if (rest) rec.received->insert(rec.received->end(), rest->begin(), rest->end());
        else rec.received = std::unexpected(rest.error());
        rec.sent = co_await stream->shutdown_write();
      }
      rec.done = true;
      co_return;
    }
    if (auto ok = stream->respond(200); !ok) {
      rec.sent = std::unexpected(ok.error());
      rec.done = true;
      co_return;
    }
    if (mode == "echo") {
      auto n = co_await echo(*stream);
      if (!n) rec.sent = std::unexpected(n.error());
    } else if (mode == "exchange") {
      auto data = random_bytes(seed, size);
      auto [got, sent] = co_await read_and_write(*stream, data);
      rec.received = std::move(got);
      rec.sent = sent;
    } else if (mode == "source") {
      auto data = random_bytes(seed, size);
      rec.sent = co_await write_and_close(*stream, data);
    } else if (mode == "first") {
      auto data = random_bytes(seed, size);
      auto w = co_await stream->write_all(data);
      rec.received = co_await read_to_eof(*stream);
      if (w && rec.received) w = co_await write_and_close(*stream, *rec.received);
      rec.sent = w;
    } else if (mode == "halfclose") {
      rec.received = co_await read_to_eof(*stream);
      const auto data = random_bytes(seed, size);
      rec.sent = co_await write_and_close(*stream, data);
    } else if (mode == "reset") {
      // Many small writes keep this stream's DATA interleaved with other streams' frames in the
      // connection's write batches; then abort mid-flow.
      auto data = random_bytes(seed, size);
      for (std::size_t off = 0; off < size && rec.sent; off += 16 * 1024) {
        const auto piece = std::span(data).subspan(off, std::min<std::size_t>(16 * 1024, size - off));
        rec.sent = co_await stream->write_all(piece);
      }
      stream->reset();
    } else if (mode == "rst") {
      auto data = random_bytes(seed, size);
      rec.sent = co_await stream->write_all(data);
      // Only once the bytes are out: a reset discards what is still queued.
      const std::function<bool()> flushed = [&] { return stream->closed() || stream->send_queued() == 0; };
      (void)co_await wait_until(flushed);
      stream->reset_for_test(static_cast<std::uint32_t>(seed));
    } else if (mode == "sink") {
      rec.received = co_await read_to_eof(*stream);
    }
    rec.done = true;
  }

  void shutdown() {
    if (shut_down_) return;
    shut_down_ = true;
    std::error_code ignored;
    acceptor_.close(ignored);
    if (pool_) pool_->close_all();
    for (auto& s : sessions) s->abort("test over");
    for (auto& s : client_sessions_) s->abort("test over");
    io_.restart();
    io_.run_for(1s);
  }

  tls::testing::TempDir dir_;
  net::InPodSockets sockets_;
  net::DrainScope tasks_{"loopback"};
  std::unique_ptr<tls::CertManager> certs_;
  std::shared_ptr<const tls::IdentityTls> server_tls_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::uint16_t port_ = 0;
  hbone::ClientPool::Options options_;
  std::unique_ptr<hbone::ClientPool> pool_;
  std::vector<std::shared_ptr<h2::Session>> client_sessions_;
  bool shut_down_ = false;
};

}  // namespace meshnode::testing
