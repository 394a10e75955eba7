// HTTP/2 CONNECT streams over real loopback TCP + mTLS, through hbone::accept_hbone and
// hbone::ClientPool: byte integrity, half-close, server-first, resets, per-stream flow control.

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>

#include "net/deadline.hpp"
#include "unit/h2/loopback.hpp"

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

}  // namespace
}  // namespace meshnode::h2
