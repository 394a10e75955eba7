// HTTP/2 CONNECT streams over real loopback TCP + mTLS, through hbone::accept_hbone and
// hbone::ClientPool: byte integrity, half-close, server-first, resets, per-stream flow control.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <string>

#include "net/deadline.hpp"
#include "tls/tls_stream.hpp"
#include "unit/h2/loopback.hpp"
#include "unit/h2/raw_h2.hpp"

namespace meshnode::h2 {
namespace {

using namespace meshnode::testing;
using base::Errc;

// Each test body is a named coroutine over the loopback (STYLE "Async": no capturing lambda is a
// coroutine; values are named before they are awaited).

std::string describe(const base::Result<Bytes>& r) {
  return r ? std::to_string(r->size()) + " bytes" : r.error().message();
}

asio::awaitable<void> eight_mib_each_way(HboneLoopback& lo) {
  constexpr std::size_t kSize = 8 << 20;
  auto stream = co_await lo.connect("exchange", "x", kSize, /*seed=*/1);
  CO_ASSERT(stream, stream.error().message());
  auto up = random_bytes(2, kSize);
  // Odd-sized writes so frame boundaries never line up with the writes.
  auto [got, sent] = co_await read_and_write(**stream, up, 100'003);
  EXPECT_TRUE(sent) << sent.error().message();
  CO_ASSERT(got, got.error().message());
  EXPECT_EQ(got->size(), kSize);
  EXPECT_TRUE(*got == random_bytes(1, kSize)) << "server->client bytes differ";
  const std::function<bool()> served = [&] { return lo.records["x"].done; };
  CO_ASSERT(co_await wait_until(served));
  const auto& rec = lo.records["x"];
  EXPECT_TRUE(rec.sent);
  CO_ASSERT(rec.received, rec.received.error().message());
  EXPECT_EQ(rec.received->size(), kSize);
  EXPECT_TRUE(*rec.received == up) << "client->server bytes differ";
}

TEST(H2Stream, EightMibEachWayIntact) {
  HboneLoopback lo;
  lo.run(eight_mib_each_way(lo), 30s);
}

// A copy loop's writer: every chunk passes through one buffer that is overwritten as soon as
// write_all returns, so a DATA frame still pointing into it (Stream::write_all frames straight
// from the caller's bytes) would carry 0xEE. Sizes cross the 16 KiB block, the 256 KiB stream
// send buffer and the peer's 1 MiB window.
asio::awaitable<base::Result<void>> write_through_one_buffer(net::ByteStream& s, std::span<const std::byte> data) {
  static constexpr std::array<std::size_t, 6> kChunks{1, 777, 16'384, 16'385, 100'003, 300'000};
  Bytes buf(300'000);
  for (std::size_t i = 0; !data.empty(); ++i) {
    const std::size_t n = std::min(kChunks[i % kChunks.size()], data.size());
    std::copy_n(data.begin(), n, buf.begin());
    auto w = co_await s.write_all(std::span(buf).first(n));
    if (!w) co_return w;
    std::fill(buf.begin(), buf.end(), std::byte{0xEE});
    data = data.subspan(n);
  }
  co_return co_await s.shutdown_write();
}

asio::awaitable<void> reused_writer_buffers(HboneLoopback& lo) {
  using namespace asio::experimental::awaitable_operators;
  constexpr std::size_t kSize = 6 << 20;
  auto stream = co_await lo.connect("echo", "reuse");
  CO_ASSERT(stream, stream.error().message());
  const Bytes up = random_bytes(3, kSize);
  // The server echoes through its own reused 64 KiB buffer: both directions lend.
  auto reader = read_to_eof(**stream);
  auto writer = write_through_one_buffer(**stream, up);
  auto both = std::move(reader) && std::move(writer);
  auto [got, sent] = co_await std::move(both);
  EXPECT_TRUE(sent) << sent.error().message();
  CO_ASSERT(got, got.error().message());
  EXPECT_EQ(got->size(), kSize);
  EXPECT_TRUE(*got == up) << "echoed bytes differ: a frame read a writer's buffer after write_all returned";
}

TEST(H2Stream, WritersMayReuseTheirBufferOnceWriteAllReturns) {
  HboneLoopback lo;
  lo.run(reused_writer_buffers(lo), 30s);
}

asio::awaitable<void> request_headers(HboneLoopback& lo) {
  auto stream = co_await lo.connect("sink", "h");
  CO_ASSERT(stream, stream.error().message());
  EXPECT_EQ((*stream)->header(":status"), "200");
  EXPECT_TRUE(co_await (*stream)->shutdown_write());
  const std::function<bool()> served = [&] { return lo.records["h"].done; };
  CO_ASSERT(co_await wait_until(served));
  EXPECT_EQ(lo.records["h"].authority, "127.0.0.1:8080");
  EXPECT_EQ(lo.records["h"].forwarded, "for=\"10.0.0.1:43210\";host=echo.default.svc.cluster.local");
  EXPECT_EQ(lo.records["h"].peer_identity, kClientId);
}

TEST(H2Stream, RequestHeadersArriveAsSent) {
  HboneLoopback lo;
  lo.run(request_headers(lo));
}

asio::awaitable<void> half_close(HboneLoopback& lo) {
  // The server answers only after it saw END_STREAM, and answers with more than a window.
  auto stream = co_await lo.connect("halfclose", "hc", 6 << 20, 7);
  CO_ASSERT(stream, stream.error().message());
  auto up = random_bytes(8, 1 << 20);
  auto sent = co_await write_and_close(**stream, up);
  CO_ASSERT(sent, sent.error().message());
  auto reply = co_await read_to_eof(**stream);
  CO_ASSERT(reply, reply.error().message());
  EXPECT_TRUE(*reply == random_bytes(7, 6 << 20)) << reply->size();
  // A write after shutdown_write is refused, not silently dropped.
  const auto late_bytes = as_bytes("late");
  auto late = co_await (*stream)->write_all(late_bytes);
  EXPECT_FALSE(late);
  const std::function<bool()> served = [&] { return lo.records["hc"].done; };
  CO_ASSERT(co_await wait_until(served));
  CO_ASSERT(lo.records["hc"].received);
  EXPECT_TRUE(*lo.records["hc"].received == up);
}

TEST(H2Stream, HalfCloseKeepsTheOtherDirectionOpen) {
  HboneLoopback lo;
  lo.run(half_close(lo));
}

asio::awaitable<void> server_speaks_first(HboneLoopback& lo) {
  auto stream = co_await lo.connect("first", "sf", 100'000, 11);
  CO_ASSERT(stream, stream.error().message());
  // Nothing written yet: the greeting must arrive on its own.
  auto greeting = co_await read_exactly(**stream, 100'000);
  CO_ASSERT(greeting, greeting.error().message());
  EXPECT_TRUE(*greeting == random_bytes(11, 100'000));
  const auto thanks = as_bytes("thanks");
  auto sent = co_await write_and_close(**stream, thanks);
  CO_ASSERT(sent);
  auto rest = co_await read_to_eof(**stream);
  CO_ASSERT(rest, rest.error().message());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(rest->data()), rest->size()), "thanks");
}

TEST(H2Stream, ServerSpeaksFirst) {
  HboneLoopback lo;
  lo.run(server_speaks_first(lo));
}

// read_now takes the stream's received bytes without waiting and returns their window credit as
// read_some does: 2 MiB (twice the stream's 1 MiB window) arrives through read_now alone.
asio::awaitable<void> read_now_drains_without_waiting(HboneLoopback& lo) {
  constexpr std::size_t kSize = 2 << 20;
  auto stream = co_await lo.connect("first", "rn", kSize, 12);
  CO_ASSERT(stream, stream.error().message());
  Bytes got;
  std::array<std::byte, 4096> buf{};
  // Each pass takes bytes or parks in wait_readable; a read_now that took nothing while the stream
  // is readable would spin here without ever suspending, so the passes are counted.
  for (std::size_t passes = 0; got.size() < kSize; ++passes) {
    CO_ASSERT(passes < 4 * kSize / buf.size(), "read_now takes nothing from a readable stream");
    co_await (*stream)->wait_readable();
    const std::size_t n = (*stream)->read_now(buf);
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
  }
  EXPECT_TRUE(got == random_bytes(12, kSize)) << got.size();
  EXPECT_EQ((*stream)->read_now(buf), 0u) << "nothing more was sent";
  const auto bye = as_bytes("bye");
  auto sent = co_await write_and_close(**stream, bye);
  CO_ASSERT(sent);
  auto rest = co_await read_to_eof(**stream);
  CO_ASSERT(rest, rest.error().message());
  EXPECT_EQ(rest->size(), 3u) << "END_STREAM is left for read_some";
}

TEST(H2Stream, ReadNowTakesReceivedBytesAndReturnsTheirCredit) {
  HboneLoopback lo;
  lo.run(read_now_drains_without_waiting(lo));
}

// TlsStream::input_drained is the HTTP/2 reader's hint that its next read would find the socket
// empty (then it runs the woken stream readers before reading again). It must say "drained" after
// a small message is fully read, and never while OpenSSL still holds decrypted or buffered records.
asio::awaitable<void> server_handshake(tls::TlsStream& server, bool& done) {
  auto ok = co_await server.handshake(tls::TlsStream::Role::kServer);
  EXPECT_TRUE(ok) << ok.error().message();
  done = true;
}

// A client and a server TlsStream over loopback TCP, handshaken. The server's is moved once
// before use, as Session::create moves it: the read BIO's callback must follow.
struct TlsPair {
  std::optional<tls::TlsStream> client;
  std::optional<tls::TlsStream> server;
};

asio::awaitable<bool> handshake_pair(HboneLoopback& lo, TlsPair& pair) {
  asio::ip::tcp::acceptor acceptor(lo.io(), asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::ip::tcp::socket client_tcp(lo.io());
  auto [cec] = co_await client_tcp.async_connect(acceptor.local_endpoint(), net::kNoThrow);
  EXPECT_FALSE(cec) << cec.message();
  auto [aec, server_tcp] = co_await acceptor.async_accept(net::kNoThrow);
  EXPECT_FALSE(aec) << aec.message();
  auto client_identity = lo.certs().get(kClientId);
  auto server_identity = lo.certs().get(kServerId);
  if (cec || aec || !client_identity || !server_identity) co_return false;
  pair.client.emplace(std::move(client_tcp), SSL_new((*client_identity)->client_ctx.get()));
  tls::TlsStream first_home(std::move(server_tcp), SSL_new((*server_identity)->server_ctx.get()));
  pair.server.emplace(std::move(first_home));
  bool server_done = false;
  asio::co_spawn(lo.io(), server_handshake(*pair.server, server_done), asio::detached);
  auto hs = co_await pair.client->handshake(tls::TlsStream::Role::kClient);
  if (!hs) pair.server->close();  // the server's handshake then ends too: it must not outlive `server`
  const std::function<bool()> handshaken = [&] { return server_done; };
  const bool server_finished = co_await wait_until(handshaken);
  EXPECT_TRUE(hs) << hs.error().message();
  co_return hs && server_finished;
}

asio::awaitable<void> input_drained_tracks_the_socket(HboneLoopback& lo) {
  TlsPair pair;
  CO_ASSERT(co_await handshake_pair(lo, pair));
  tls::TlsStream& client = *pair.client;
  tls::TlsStream& server = *pair.server;

  // One small message, read whole: nothing left anywhere.
  auto sent = co_await client.write_all(as_bytes("ping"));
  CO_ASSERT(sent, sent.error().message());
  std::array<std::byte, 64> small{};
  auto got = co_await server.read_some(small);
  CO_ASSERT(got, got.error().message());
  EXPECT_EQ(*got, 4u);
  EXPECT_TRUE(server.input_drained()) << "a fully read small message leaves nothing to read";

  // 30,000 bytes (two records) read 100 bytes at a time: OpenSSL holds the rest meanwhile.
  const Bytes big = random_bytes(7, 30'000);
  sent = co_await client.write_all(big);
  CO_ASSERT(sent, sent.error().message());
  // All of it at the server's socket before the first read, so "drained" can only be said at
  // the end (else a pause between two segments would be a legitimate drained moment).
  const std::function<bool()> all_arrived = [&] {
    int queued = 0;
    return ::ioctl(server.socket().native_handle(), FIONREAD, &queued) == 0 &&
           static_cast<std::size_t>(queued) >= big.size();
  };
  CO_ASSERT(co_await wait_until(all_arrived));
  std::array<std::byte, 100> piece{};
  std::size_t total = 0;
  bool drained_early = false;
  while (total < big.size()) {
    auto n = co_await server.read_some(piece);
    CO_ASSERT(n && *n > 0, (n ? std::string("EOF") : n.error().message()));
    total += *n;
    if (total < big.size() && server.input_drained()) drained_early = true;
  }
  EXPECT_EQ(total, big.size());
  EXPECT_FALSE(drained_early) << "said drained while decrypted bytes were still buffered";
  EXPECT_TRUE(server.input_drained());
}

TEST(TlsStream, InputDrainedOnlyWhenNothingIsBufferedAndTheSocketReadCameUpShort) {
  HboneLoopback lo;
  lo.run(input_drained_tracks_the_socket(lo));
}

// Reads `want` bytes from `s` (or up to an error or EOF).
struct Received {
  Bytes data;
  base::Result<std::size_t> end = 0;  // the read that stopped it (0 = EOF), once it stopped short
  bool done = false;
};
asio::awaitable<void> receive(tls::TlsStream& s, std::size_t want, Received& out) {
  std::array<std::byte, 32 * 1024> buf{};
  while (out.data.size() < want) {
    auto n = co_await s.read_some(buf);
    if (!n || *n == 0) {
      out.end = n;
      break;
    }
    out.data.insert(out.data.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
  }
  out.done = true;
}

// Whether the peer's RST has reached `s`'s socket, by poll(2), which leaves the pending error in
// place.
bool reset_arrived(tls::TlsStream& s) {
  pollfd p{s.socket().native_handle(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

// After a short read the TLS stream reads into a 2 KiB buffer of its own, and waits there (so a
// waiting reader holds no input buffer). Records smaller, just smaller, exactly as big and bigger
// than that buffer all arrive whole, whether they arrive while the reader waits or before it
// reads; and a record that fills the buffer exactly and is followed by the peer's RST still
// reaches the reader before the reset does (the kernel reports the reset once, after the bytes).
asio::awaitable<void> records_around_the_wait_buffer(HboneLoopback& lo) {
  TlsPair pair;
  CO_ASSERT(co_await handshake_pair(lo, pair));
  tls::TlsStream& client = *pair.client;
  tls::TlsStream& server = *pair.server;
  // A TLS 1.3 record of n plaintext bytes is n + 22 on the wire (header 5, content type 1, tag 16).
  constexpr std::size_t kFillsWaitBuffer = 2048 - 22;
  std::uint64_t seed = 40;
  for (const std::size_t size : {std::size_t{1}, kFillsWaitBuffer - 1, kFillsWaitBuffer, kFillsWaitBuffer + 1,
                                 std::size_t{5000}, std::size_t{40'000}}) {
    for (const bool reader_waits_first : {true, false}) {
      const Bytes message = random_bytes(++seed, size);
      Received got;
      if (reader_waits_first) asio::co_spawn(lo.io(), receive(server, size, got), asio::detached);
      auto sent = co_await client.write_all(message);
      CO_ASSERT(sent, sent.error().message());
      if (!reader_waits_first) {
        const std::function<bool()> all_arrived = [&] {
          int queued = 0;
          return ::ioctl(server.socket().native_handle(), FIONREAD, &queued) == 0 &&
                 static_cast<std::size_t>(queued) >= size;
        };
        CO_ASSERT(co_await wait_until(all_arrived));
        asio::co_spawn(lo.io(), receive(server, size, got), asio::detached);
      }
      const std::function<bool()> received = [&] { return got.done; };
      CO_ASSERT(co_await wait_until(received), "message of " + std::to_string(size) + " B never read");
      EXPECT_TRUE(got.data == message) << size << " B message, reader waiting first: " << reader_waits_first
                                       << ", got " << got.data.size() << " B";
    }
  }

  const Bytes last = random_bytes(99, kFillsWaitBuffer);
  auto sent = co_await client.write_all(last);
  CO_ASSERT(sent, sent.error().message());
  client.socket().set_option(asio::socket_base::linger(true, 0));
  client.close();  // RST, right behind the record
  const std::function<bool()> arrived = [&] { return reset_arrived(server); };
  CO_ASSERT(co_await wait_until(arrived));
  Received got;
  asio::co_spawn(lo.io(), receive(server, last.size() + 1, got), asio::detached);
  const std::function<bool()> ended = [&] { return got.done; };
  CO_ASSERT(co_await wait_until(ended));
  EXPECT_TRUE(got.data == last) << "the record before the RST was lost: got " << got.data.size() << " B";
  CO_ASSERT(!got.end, "the RST became an EOF");
  EXPECT_EQ(got.end.error().code, Errc::kReset) << got.end.error().message();
}

TEST(TlsStream, RecordsAroundTheWaitBufferSizeArriveWholeAndBeforeAReset) {
  HboneLoopback lo;
  lo.run(records_around_the_wait_buffer(lo));
}

asio::awaitable<void> server_reset(HboneLoopback& lo) {
  auto stream = co_await lo.connect("reset", "r", 100'000, 5);
  CO_ASSERT(stream, stream.error().message());
  auto got = co_await read_to_eof(**stream);
  CO_ASSERT(!got, "read ended cleanly after " << describe(got) << "; a reset must not look like EOF");
  EXPECT_EQ(got.error().code, Errc::kReset) << got.error().message();
  // The stream is dead both ways now.
  const auto x = as_bytes("x");
  auto w = co_await (*stream)->write_all(x);
  EXPECT_FALSE(w);
}

TEST(H2Stream, ServerResetReachesClientAsReset) {
  HboneLoopback lo;
  lo.run(server_reset(lo));
}

asio::awaitable<void> client_reset(HboneLoopback& lo) {
  auto stream = co_await lo.connect("sink", "cr");
  CO_ASSERT(stream, stream.error().message());
  const auto partial = as_bytes("partial request");
  CO_ASSERT(co_await (*stream)->write_all(partial));
  (*stream)->reset();
  std::array<std::byte, 1> one{};
  auto r = co_await (*stream)->read_some(one);
  EXPECT_FALSE(r);
  const std::function<bool()> served = [&] { return lo.records["cr"].done; };
  CO_ASSERT(co_await wait_until(served));
  const auto& rec = lo.records["cr"];
  CO_ASSERT(!rec.received, "server saw a clean EOF after " << describe(rec.received));
  EXPECT_EQ(rec.received.error().code, Errc::kReset) << rec.received.error().message();
  // The connection survives a stream reset.
  auto next = co_await lo.connect("echo", "after");
  CO_ASSERT(next, next.error().message());
  const auto still_here = as_bytes("still here");
  auto [got, sent] = co_await read_and_write(**next, still_here);
  CO_ASSERT(got);
  EXPECT_EQ(got->size(), 10u);
  EXPECT_EQ(lo.pool().connection_count(), 1u);
}

TEST(H2Stream, ClientResetReachesServerAsReset) {
  HboneLoopback lo;
  lo.run(client_reset(lo));
}

asio::awaitable<void> stalled_stream(HboneLoopback& lo) {
  // Stream A: the server pushes 16 MiB that the client never reads.
  auto stalled = co_await lo.connect("source", "stalled", 16 << 20, 21);
  CO_ASSERT(stalled, stalled.error().message());
  // Stream B, same connection: 32 MiB must still flow.
  auto busy = co_await lo.connect("source", "busy", 32 << 20, 22);
  CO_ASSERT(busy, busy.error().message());
  EXPECT_EQ(lo.pool().connection_count(), 1u);

  // If B is starved, the deadline aborts the connection and B fails instead of hanging.
  const auto ex = co_await asio::this_coro::executor;
  net::Deadline deadline(ex, 15s, [&] { lo.pool().close_all(); });
  auto got = co_await read_to_eof(**busy);
  EXPECT_FALSE(deadline.expired())
      << "32 MiB on a parallel stream did not finish: the stalled stream blocked it";
  CO_ASSERT(got, got.error().message());
  EXPECT_TRUE(*got == random_bytes(22, 32 << 20)) << got->size();
  deadline.cancel();

  // Back-pressure reached the stalled stream's writer: it could not have queued 16 MiB.
  EXPECT_FALSE(lo.records["stalled"].done) << "server finished writing a stream nobody reads";
  // And its bytes are intact, just late.
  auto head = co_await read_exactly(**stalled, 1 << 20);
  CO_ASSERT(head, head.error().message());
  EXPECT_TRUE(*head == Bytes(random_bytes(21, 1 << 20)));
}

TEST(H2Stream, StalledStreamDoesNotBlockItsConnection) {
  HboneLoopback lo;
  lo.run(stalled_stream(lo), 30s);
}

// The server resets a stream while the connection is busy sending that stream's DATA: its last
// write returns between two socket writes, when a frame of the stream is queued in nghttp2.
asio::awaitable<void> reset_while_own_data_in_flight(HboneLoopback& lo) {
  for (int i = 0; i < 8; ++i) {
    std::size_t size = (1 << 20) + static_cast<std::size_t>(i) * 5000;
    const std::string tag = "r" + std::to_string(i);
    const std::uint64_t seed = 300 + i;
    auto stream = co_await lo.connect("reset", tag, size, seed);
    CO_ASSERT(stream, stream.error().message());
    Bytes got;
    Bytes buf(32 * 1024);
    base::Result<std::size_t> n = 1;
    while ((n = co_await (*stream)->read_some(buf)) && *n > 0)
      got.insert(got.end(), buf.begin(), buf.begin() + *n);
    CO_ASSERT(!n, "clean EOF after " << got.size() << " bytes instead of a reset");
    EXPECT_EQ(n.error().code, Errc::kReset);
    auto want = random_bytes(300 + i, size);
    EXPECT_TRUE(got.size() <= want.size() && std::equal(got.begin(), got.end(), want.begin()))
        << "bytes before the reset are not what the server wrote";
  }
  // The connection is still healthy.
  auto echo_stream = co_await lo.connect("echo", "e");
  CO_ASSERT(echo_stream, echo_stream.error().message());
  const auto ok = as_bytes("ok");
  auto [got, sent] = co_await read_and_write(**echo_stream, ok);
  CO_ASSERT(got, got.error().message());
  EXPECT_EQ(got->size(), 2u);
  EXPECT_EQ(lo.pool().connection_count(), 1u);
}

TEST(H2Stream, ResetWhileOwnDataIsInFlight) {
  HboneLoopback lo;
  lo.run(reset_while_own_data_in_flight(lo));
}

// One of the streams that the server resets mid-flow; counts itself finished, and wrong when what
// it saw is not a prefix of what the server wrote ended by a reset.
asio::awaitable<void> reset_probe(HboneLoopback& lo, int i, std::size_t size, int& finished, int& wrong) {
  const std::string tag = "r" + std::to_string(i);
  const std::uint64_t seed = 200 + i;
  auto s = co_await lo.connect("reset", tag, size, seed);
  if (s) {
    Bytes got;
    Bytes buf(32 * 1024);
    base::Result<std::size_t> n = 1;
    while ((n = co_await (*s)->read_some(buf)) && *n > 0)
      got.insert(got.end(), buf.begin(), buf.begin() + *n);
    auto want = random_bytes(200 + i, size);
    // Whatever arrived before the reset is a prefix of what was sent, and the end is a reset.
    bool prefix = got.size() <= want.size() && std::equal(got.begin(), got.end(), want.begin());
    if (!prefix || n || n.error().code != Errc::kReset) ++wrong;
  } else {
    ADD_FAILURE() << s.error().message();
  }
  ++finished;
}

asio::awaitable<void> resets_beside_a_bulk_stream(HboneLoopback& lo) {
  constexpr int kResets = 24;
  constexpr std::size_t kBulk = 8 << 20;
  auto bulk = co_await lo.connect("source", "bulk", kBulk, 100);
  CO_ASSERT(bulk, bulk.error().message());
  int finished = 0;
  int wrong = 0;
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < kResets; ++i) {
    std::size_t size = 64 * 1024 + static_cast<std::size_t>(i) * 37 * 1024;
    asio::co_spawn(ex, reset_probe(lo, i, size, finished, wrong), asio::detached);
  }
  auto got = co_await read_to_eof(**bulk);
  CO_ASSERT(got, got.error().message());
  EXPECT_TRUE(*got == random_bytes(100, kBulk));
  const std::function<bool()> all_finished = [&] { return finished == kResets; };
  CO_ASSERT(co_await wait_until(all_finished));
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(lo.pool().connection_count(), 1u);
}

TEST(H2Stream, ResetsWhileOtherStreamsStreamDoNotCorruptTheConnection) {
  HboneLoopback lo;
  lo.run(resets_beside_a_bulk_stream(lo), 30s);
}

// Issue 11 defect 2: early data on refused CONNECTs kept its connection-window credit forever;
// 5,000 × 1 KiB is more than the server's 4 MiB connection window, so the connection stalled.
// A raw client sends each CONNECT and its early data in one write (as an attacker would, so the
// bytes are buffered before the refusal), within the flow-control credit the server grants.
struct Credit {
  raw::RawClient& client;
  std::uint64_t sent_connection = 0;
  std::map<std::uint32_t, std::uint64_t> sent_stream;

  std::uint64_t connection_room() {
    return 65535 + client.seen.window_updates[0] - sent_connection;
  }
  std::uint64_t stream_room(std::uint32_t id, std::uint64_t initial) {
    return initial + client.seen.window_updates[id] - sent_stream[id];
  }
};

asio::awaitable<void> refused_early_data(HboneLoopback& lo) {
  raw::RawClient client(lo);
  CO_ASSERT(co_await client.connect());
  // SETTINGS ACK after the server's SETTINGS: its 1 MiB stream window then applies.
  CO_ASSERT(co_await client.send(raw::preface()));
  const std::function<bool(const raw::Seen&)> got_settings = [](const raw::Seen& s) {
    return std::any_of(s.frames.begin(), s.frames.end(), [](const raw::Frame& f) { return f.type == raw::kSettings; });
  };
  CO_ASSERT(co_await client.read_until(got_settings, 5s));
  CO_ASSERT(co_await client.send(raw::frame(raw::kSettings, raw::kAck, 0, "")));
  Credit credit{client};
  const std::string early(1024, 'e');
  constexpr int kRefused = 5000;
  constexpr int kBatch = 100;
  for (int first = 0; first < kRefused; first += kBatch) {
    const std::function<bool(const raw::Seen&)> room = [&](const raw::Seen&) {
      return credit.connection_room() >= kBatch * early.size();
    };
    CO_ASSERT(co_await client.read_until(room, 5s),
              "connection window not returned after " << first << " refused CONNECTs with early data");
    std::string bytes;
    for (int i = first; i < first + kBatch; ++i) {
      const auto id = static_cast<std::uint32_t>(2 * i + 1);
      const std::string block = raw::connect_block("127.0.0.1:8080", raw::literal("x-mode", "status") +
                                                                          raw::literal("x-tag", "r") +
                                                                          raw::literal("x-size", "403") +
                                                                          raw::literal("x-seed", "0"));
      bytes += raw::headers(id, block) + raw::data(id, early);
      credit.sent_connection += early.size();
    }
    CO_ASSERT(co_await client.send(std::move(bytes)));
  }
  const std::function<bool(const raw::Seen&)> all_refused = [&](const raw::Seen& s) {
    return s.status.size() == static_cast<std::size_t>(kRefused);
  };
  CO_ASSERT(co_await client.read_until(all_refused, 10s), client.seen.status.size() << " answered");
  for (auto [id, status] : client.seen.status) CO_ASSERT(status == 403, "stream " << id << " answered " << status);

  // Then one stream moves 10 MiB client -> server on the same connection.
  constexpr std::uint32_t kGood = 2 * kRefused + 1;
  constexpr std::size_t kSize = 10 << 20;
  const std::string block = raw::connect_block("127.0.0.1:8080", raw::literal("x-mode", "sink") +
                                                                      raw::literal("x-tag", "good") +
                                                                      raw::literal("x-size", "0") + raw::literal("x-seed", "0"));
  CO_ASSERT(co_await client.send(raw::headers(kGood, block)));
  const Settings defaults;
  std::size_t sent = 0;
  while (sent < kSize) {
    const std::function<bool(const raw::Seen&)> room = [&](const raw::Seen&) {
      return credit.connection_room() > 0 && credit.stream_room(kGood, defaults.stream_window) > 0;
    };
    CO_ASSERT(co_await client.read_until(room, 5s), "stalled after " << sent << " bytes of the good stream");
    const std::size_t n = std::min<std::uint64_t>(
        {16 * 1024, kSize - sent, credit.connection_room(), credit.stream_room(kGood, defaults.stream_window)});
    const std::string chunk(n, 'g');
    const bool last = sent + n == kSize;
    CO_ASSERT(co_await client.send(raw::data(kGood, chunk, last ? raw::kEndStream : 0)));
    credit.sent_connection += n;
    credit.sent_stream[kGood] += n;
    sent += n;
  }
  const std::function<bool()> served = [&] { return lo.records["good"].done; };
  CO_ASSERT(co_await wait_until(served));
  CO_ASSERT(lo.records["good"].received, lo.records["good"].received.error().message());
  EXPECT_EQ(lo.records["good"].received->size(), kSize);
  EXPECT_FALSE(client.seen.goaway_code.has_value());
}

TEST(H2Stream, RefusedConnectsWithEarlyDataReturnTheirConnectionCredit) {
  HboneLoopback lo;
  lo.run(refused_early_data(lo), 60s);
}

// Issue 11 defect 3: a stream whose peer grants no window queued 256 KiB (and its writer kept
// reading its app); now it queues one small chunk and the connection's queues stay bounded.
asio::awaitable<void> zero_window_streams(HboneLoopback& lo) {
  constexpr int kStreams = 100;
  std::vector<std::shared_ptr<Stream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    // More than a stream window (1 MiB) each, so every writer stalls once the window is gone.
    auto s = co_await lo.connect("source", "z" + std::to_string(i), (5 << 20) / 4, 40 + i);
    CO_ASSERT(s, s.error().message());
    streams.push_back(*s);
  }
  CO_ASSERT(lo.sessions.size() == 1u);
  auto server = lo.sessions[0];
  std::size_t peak = 0;
  // Every server writer ends up waiting for room: that is the stalled state, reached once the
  // client's connection window (4 MiB) is used up. The peak is sampled on the way there.
  const std::function<bool()> all_blocked = [&] {
    peak = std::max(peak, server->buffered_bytes());
    return server->blocked_writers() == static_cast<std::size_t>(kStreams);
  };
  EXPECT_TRUE(co_await wait_until(all_blocked, 10s)) << server->blocked_writers() << " writers blocked";
  peak = std::max(peak, server->buffered_bytes());
  const Settings defaults;
  const std::size_t bound = defaults.connection_send_buffer + kStreams * 16 * 1024;
  EXPECT_LE(peak, bound) << "server queued " << peak << " bytes for " << kStreams << " streams nobody reads";
  // The stalled streams still deliver, intact, when read (the first: the streams that got data
  // hold the whole connection window until they are read).
  auto head = co_await read_exactly(*streams[0], 256 * 1024);
  CO_ASSERT(head, head.error().message());
  EXPECT_TRUE(*head == random_bytes(40, 256 * 1024));
}

TEST(H2Stream, ZeroWindowStreamsHoldOneSmallChunkEach) {
  HboneLoopback lo;
  lo.options().max_streams = 200;
  lo.run(zero_window_streams(lo), 30s);
}

// Issue 11 defect 4: RST_STREAM(NO_ERROR) before END_STREAM and RST_STREAM(CANCEL) end the
// stream like END_STREAM (the reference's reading, research §2.1 "Data"): bytes, then EOF.
asio::awaitable<void> graceful_reset(HboneLoopback& lo, std::uint32_t code) {
  auto stream = co_await lo.connect("rst", "g", 100'000, code);
  CO_ASSERT(stream, stream.error().message());
  auto got = co_await read_to_eof(**stream);
  CO_ASSERT(got, "RST_STREAM(" << code << ") read as " << got.error().message() << ", not EOF");
  EXPECT_TRUE(*got == random_bytes(code, 100'000)) << got->size();
}

TEST(H2Stream, PeerResetWithNoErrorIsEof) {
  HboneLoopback lo;
  lo.run(graceful_reset(lo, NGHTTP2_NO_ERROR));
}

TEST(H2Stream, PeerResetWithCancelIsEof) {
  HboneLoopback lo;
  lo.run(graceful_reset(lo, NGHTTP2_CANCEL));
}

asio::awaitable<void> error_reset(HboneLoopback& lo) {
  auto stream = co_await lo.connect("rst", "e", 1000, NGHTTP2_INTERNAL_ERROR);
  CO_ASSERT(stream, stream.error().message());
  auto got = co_await read_to_eof(**stream);
  CO_ASSERT(!got, "RST_STREAM(INTERNAL_ERROR) read as a clean EOF");
  EXPECT_EQ(got.error().code, Errc::kReset);
}

TEST(H2Stream, PeerResetWithAnErrorCodeIsAReset) {
  HboneLoopback lo;
  lo.run(error_reset(lo));
}

// Issue 15: a connection that carried bulk data and then only keepalive PINGs gives its write
// buffers back after an idle interval. Its own PING used to count as traffic, so a pooled
// connection kept the largest batch it ever sent (~1 MB after a bulk upload) for good.
asio::awaitable<void> idle_connection_releases_write_buffers(HboneLoopback& lo) {
  h2::Settings settings;
  settings.ping_interval = 1s;
  auto client = co_await lo.dial_session(settings);
  CO_ASSERT(client, client.error().message());
  auto session = *client;
  const auto h = lo.headers("echo", "bulk");
  auto stream = session->open_stream(h);
  CO_ASSERT(stream, stream.error().message());
  auto status = co_await (*stream)->wait_response();
  CO_ASSERT(status && *status == 200, "the echo CONNECT was not accepted");
  const auto data = random_bytes(11, 4 << 20);
  auto [got, sent] = co_await read_and_write(**stream, data, 1 << 20);
  EXPECT_TRUE(sent && got && *got == data) << "the bulk bytes did not come back intact";
  EXPECT_GE(session->write_buffer_bytes(), 16u * 1024) << "a 4 MiB upload left no write buffer to release";
  // Two intervals: the tick that still sees the upload's DATA, then the first idle one. What
  // stays is what the PINGs after the release need (tens of bytes).
  constexpr std::size_t kPingsWorth = 1024;
  const std::function<bool()> released = [&] { return session->write_buffer_bytes() <= kPingsWorth; };
  EXPECT_TRUE(co_await wait_until(released, 5s))
      << session->write_buffer_bytes() << " bytes of write buffers still held 5 keepalive intervals after the upload";
  EXPECT_TRUE(session->alive()) << "the idle connection was closed instead of kept";
  // The release also freed OpenSSL's record buffers: the pooled connection must still carry a
  // new stream's bytes both ways.
  auto next = session->open_stream(h);
  CO_ASSERT(next, next.error().message());
  auto next_status = co_await (*next)->wait_response();
  CO_ASSERT(next_status && *next_status == 200, "the idle connection did not take a new CONNECT");
  const auto again = random_bytes(12, 256 << 10);
  auto [got_again, sent_again] = co_await read_and_write(**next, again);
  EXPECT_TRUE(sent_again && got_again && *got_again == again)
      << "a stream on the connection did not carry bytes intact after the connection released its buffers";
}

TEST(H2Stream, IdleConnectionReleasesItsWriteBuffers) {
  HboneLoopback lo;
  lo.run(idle_connection_releases_write_buffers(lo), 30s);
}

}  // namespace
}  // namespace meshnode::h2
