// hbone::ClientPool and hbone::accept_hbone over real loopback TCP + mTLS: status handling,
// identity checks, pooling limits, and a server that survives bad clients.

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/read.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/write.hpp>

#include <array>

#include "tls/ossl.hpp"
#include "unit/h2/loopback.hpp"

namespace meshnode::hbone {
namespace {

// A bare TLS client (Asio ssl::stream) for the negative cases, independent of our TlsStream.
using RawTlsClient = asio::ssl::stream<asio::ip::tcp::socket>;

using namespace meshnode::testing;
using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using base::Errc;

/// One echo round trip on a fresh pooled stream; true when the bytes came back intact.
asio::awaitable<bool> echo_ok(HboneLoopback& lo, std::string tag, std::size_t size = 100'000) {
  auto stream = co_await lo.connect("echo", tag);
  if (!stream) {
    ADD_FAILURE() << stream.error().message();
    co_return false;
  }
  auto data = random_bytes(size, size);
  auto [got, sent] = co_await (read_to_eof(**stream) && write_and_close(**stream, data));
  co_return sent && got && *got == data;
}

/// Reads from a raw socket until the peer closes it (EOF or error); returns bytes seen.
template <class Socket>
asio::awaitable<std::size_t> drain_until_closed(Socket& s) {
  std::array<char, 4096> buf{};
  std::size_t total = 0;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), net::kNoThrow);
    total += n;
    if (ec) co_return total;
  }
}

asio::awaitable<tcp::socket> dial(HboneLoopback& lo) {
  tcp::socket s(lo.io());
  auto [ec] = co_await s.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), lo.port()), net::kNoThrow);
  EXPECT_FALSE(ec) << ec.message();
  co_return s;
}

TEST(HbonePool, NonOkStatusIsAProtocolErrorNamingTheStatus) {
  HboneLoopback lo;
  lo.run([&]() -> asio::awaitable<void> {
    auto denied = co_await lo.connect("status", "deny", 403);
    CO_ASSERT(!denied, "CONNECT answered 403 returned a stream");
    EXPECT_EQ(denied.error().code, Errc::kProtocol) << denied.error().message();
    EXPECT_NE(denied.error().message().find("403"), std::string::npos) << denied.error().message();
    auto unavailable = co_await lo.connect("status", "busy", 503);
    CO_ASSERT(!unavailable);
    EXPECT_NE(unavailable.error().message().find("503"), std::string::npos) << unavailable.error().message();
    // A refused stream does not spoil the connection.
    EXPECT_TRUE(co_await echo_ok(lo, "after"));
    EXPECT_EQ(lo.pool().connection_count(), 1u);
  });
}

TEST(HbonePool, UnexpectedServerIdentityIsRejectedBeforeAnyStream) {
  HboneLoopback lo;
  lo.run([&]() -> asio::awaitable<void> {
    auto other = base::SpiffeId{"cluster.local", "default", "other"};
    auto key = lo.key({other});
    auto h = lo.headers("echo", "x");
    auto stream = co_await lo.pool().connect(key, h);
    CO_ASSERT(!stream, "stream opened to a peer with the wrong identity");
    EXPECT_EQ(stream.error().code, Errc::kIdentityMismatch) << stream.error().message();
    EXPECT_NE(stream.error().message().find(kServerId.to_string()), std::string::npos) << stream.error().message();
    EXPECT_EQ(lo.pool().connection_count(), 0u);
    // The server saw the TLS connection, then its close; never a CONNECT.
    CO_ASSERT(co_await wait_until([&] { return lo.accepted() == 1; }));
    CO_ASSERT(lo.sessions.size() == 1u);
    EXPECT_TRUE(co_await wait_until([&] { return !lo.sessions[0]->alive(); }));
    EXPECT_EQ(lo.streams_served, 0);

    // Any one matching identity in the expected set is enough.
    auto key_ok = lo.key({other, kServerId});
    auto ok = co_await lo.pool().connect(key_ok, lo.headers("sink", "y"));
    CO_ASSERT(ok, ok.error().message());
    EXPECT_TRUE(co_await (*ok)->shutdown_write());
  });
}

TEST(HbonePool, OneHundredFiftyConcurrentStreamsUseTwoConnections) {
  HboneLoopback lo;
  lo.run([&]() -> asio::awaitable<void> {
    constexpr int kStreams = 150;
    auto ex = co_await asio::this_coro::executor;
    int connected = 0;
    int intact = 0;
    int finished = 0;
    std::size_t peak_connections = 0;
    // Every stream waits here until all are open, so all 150 are concurrently active.
    asio::steady_timer all_open(ex, asio::steady_timer::time_point::max());
    for (int i = 0; i < kStreams; ++i) {
      asio::co_spawn(ex, [&, i]() -> asio::awaitable<void> {
        auto stream = co_await lo.connect("echo", "s" + std::to_string(i));
        if (!stream) {
          ADD_FAILURE() << "stream " << i << ": " << stream.error().message();
          ++finished;
          co_return;
        }
        if (++connected == kStreams) {
          peak_connections = lo.pool().connection_count();
          all_open.cancel();
        } else {
          co_await all_open.async_wait(net::kNoThrow);
        }
        auto data = random_bytes(1000 + i, 48 * 1024 + i);
        auto [got, sent] = co_await (read_to_eof(**stream) && write_and_close(**stream, data, 7000));
        if (sent && got && *got == data) ++intact;
        ++finished;
      }, asio::detached);
    }
    CO_ASSERT(co_await wait_until([&] { return finished == kStreams; }, 25s));
    EXPECT_EQ(connected, kStreams);
    EXPECT_EQ(intact, kStreams);
    // 100 streams per connection: 150 concurrent streams need exactly two.
    EXPECT_EQ(peak_connections, 2u);
    EXPECT_LE(lo.accepted(), 2u);
  }, 30s);
}

TEST(HboneServer, ClientWithoutCertificateIsRejectedAndServerKeepsServing) {
  HboneLoopback lo;
  lo.run([&]() -> asio::awaitable<void> {
    // A TLS 1.3 client offering ALPN h2 but no certificate.
    tls::SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
    SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
    static const unsigned char kAlpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
    RawTlsClient tls(co_await dial(lo), SSL_new(ctx.get()));
    auto [hec] = co_await tls.async_handshake(asio::ssl::stream_base::client, net::kNoThrow);
    // In TLS 1.3 the client may finish before the server judged it; the verdict is the close.
    if (!hec) co_await drain_until_closed(tls);
    CO_ASSERT(co_await wait_until([&] { return lo.accepted() == 1; }));
    CO_ASSERT(lo.accept_errors.size() == 1u, "a client without certificate was accepted");
    EXPECT_EQ(lo.accept_errors[0].code, Errc::kTlsHandshake) << lo.accept_errors[0].message();
    EXPECT_NE(lo.accept_errors[0].message().find("127.0.0.1"), std::string::npos) << lo.accept_errors[0].message();

    EXPECT_TRUE(co_await echo_ok(lo, "good"));
    EXPECT_EQ(lo.sessions.size(), 1u);
  });
}

TEST(HboneServer, PlaintextClientIsRejectedAndServerKeepsServing) {
  HboneLoopback lo;
  lo.run([&]() -> asio::awaitable<void> {
    auto raw = co_await dial(lo);
    std::string_view request = "CONNECT 10.0.0.1:80 HTTP/1.1\r\nHost: 10.0.0.1:80\r\n\r\n";
    auto [wec, wn] = co_await asio::async_write(raw, asio::buffer(request.data(), request.size()), net::kNoThrow);
    EXPECT_FALSE(wec);
    co_await drain_until_closed(raw);
    CO_ASSERT(co_await wait_until([&] { return lo.accepted() == 1; }));
    CO_ASSERT(lo.accept_errors.size() == 1u, "plaintext client was accepted");
    EXPECT_EQ(lo.accept_errors[0].code, Errc::kTlsHandshake) << lo.accept_errors[0].message();

    EXPECT_TRUE(co_await echo_ok(lo, "good"));
  });
}

// A client with a valid certificate that breaks HTTP/2 after the handshake: the server aborts that
// session only; a stream already open on another connection keeps flowing.
void protocol_violation_case(std::string_view after_tls) {
  HboneLoopback lo;
  lo.run([&]() -> asio::awaitable<void> {
    // A healthy stream on its own connection, half-way through an exchange.
    auto good = co_await lo.connect("echo", "good");
    CO_ASSERT(good, good.error().message());
    auto first = random_bytes(1, 50'000);
    CO_ASSERT(co_await (*good)->write_all(first));
    auto echoed = co_await read_exactly(**good, first.size());
    CO_ASSERT(echoed && *echoed == first);

    auto client = lo.certs().get(kClientId);
    CO_ASSERT(client, client.error().message());
    RawTlsClient tls(co_await dial(lo), SSL_new((*client)->client_ctx.get()));
    auto [hec] = co_await tls.async_handshake(asio::ssl::stream_base::client, net::kNoThrow);
    CO_ASSERT(!hec, hec.message());
    auto [wec, wn] = co_await asio::async_write(tls, asio::buffer(after_tls.data(), after_tls.size()), net::kNoThrow);
    EXPECT_FALSE(wec);
    co_await drain_until_closed(tls);  // the server closes the connection
    CO_ASSERT(co_await wait_until([&] { return lo.sessions.size() == 2u; }));
    EXPECT_FALSE(lo.sessions[1]->alive()) << "session kept running after a protocol violation";
    EXPECT_TRUE(lo.sessions[0]->alive());
    EXPECT_EQ(lo.streams_served, 1);

    auto second = random_bytes(2, 50'000);
    auto [got, sent] = co_await (read_to_eof(**good) && write_and_close(**good, second));
    CO_ASSERT(got, got.error().message());
    EXPECT_TRUE(*got == second);
    EXPECT_TRUE(co_await echo_ok(lo, "after"));
  });
}

TEST(HboneServer, GarbageAfterTlsAbortsOnlyThatSession) {
  protocol_violation_case("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
}

TEST(HboneServer, FrameViolationAfterPrefaceAbortsOnlyThatSession) {
  using namespace std::string_view_literals;
  // Client preface, empty SETTINGS, then DATA on stream 0 (RFC 9113 §6.1: connection error).
  constexpr auto kBytes =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
      "\x00\x00\x04\x00\x00\x00\x00\x00\x00" "abcd"sv;
  protocol_violation_case(kBytes);
}

}  // namespace
}  // namespace meshnode::hbone
