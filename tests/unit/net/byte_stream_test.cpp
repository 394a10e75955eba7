#include <gtest/gtest.h>
#include <poll.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <memory>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "net/awaitable.hpp"
#include "net/byte_stream.hpp"
#include "net/deadline.hpp"
#include "unit/support/eventually.hpp"

namespace meshnode::net {
namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// Runs the io_context until `pred()` or `limit` passes; returns whether `pred()` became true.
template <typename Pred>
bool run_until_true(asio::io_context& io, Pred pred, std::chrono::steady_clock::duration limit = 5s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!pred() && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_one_for(50ms);
  }
  return pred();
}

// Runs the io_context until `done` or `limit` passes; returns whether `done` became true.
bool run_until(asio::io_context& io, const bool& done, std::chrono::steady_clock::duration limit = 5s) {
  return run_until_true(io, [&] { return done; }, limit);
}

// A connected loopback pair of TCP sockets on `io`.
struct TcpPair {
  explicit TcpPair(asio::io_context& io) : client(io), server(io) {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client.connect(acceptor.local_endpoint());
    server = acceptor.accept();
  }
  tcp::socket client;
  tcp::socket server;
};

// Reads until EOF or error; returns the bytes and the final result (0 or the error).
struct ReadAll {
  std::string data;
  base::Result<std::size_t> end = 0;
};
asio::awaitable<ReadAll> read_all(ByteStream& s) {
  ReadAll out;
  std::array<std::byte, 4096> buf{};
  for (;;) {
    auto n = co_await s.read_some(buf);
    if (!n || *n == 0) {
      out.end = n;
      co_return out;
    }
    out.data.append(reinterpret_cast<const char*>(buf.data()), *n);
  }
}

// The tests' coroutines are named functions over references (STYLE "Async": no capturing lambda is
// itself a coroutine, no temporary is built inside a co_await expression).

asio::awaitable<void> write_close_then_read(TcpStream& client, TcpStream& server, ReadAll& got, bool& done) {
  const auto hello = as_bytes("hello");
  EXPECT_TRUE(co_await client.write_all(hello));
  client.socket().close();
  got = co_await read_all(server);
  done = true;
}

asio::awaitable<void> abort_peer_then_read(tcp::socket& peer, TcpStream& server, ReadAll& got, bool& done) {
  // An abortive close by the peer: SO_LINGER {on, 0} then close sends RST instead of FIN.
  peer.set_option(asio::socket_base::linger(true, 0));
  peer.close();
  got = co_await read_all(server);
  done = true;
}

asio::awaitable<void> reset_twice_then_read(TcpStream& client, TcpStream& server, ReadAll& got, bool& done) {
  client.reset();
  client.reset();  // idempotent
  got = co_await read_all(server);
  done = true;
}

asio::awaitable<void> write_after_peer_reset(tcp::socket& peer, TcpStream& server, base::Result<void>& result,
                                             bool& done) {
  peer.set_option(asio::socket_base::linger(true, 0));
  peer.close();
  std::vector<std::byte> chunk(64 * 1024);
  // The first write may land in the send buffer before the RST is processed; keep writing.
  for (int i = 0; i < 64 && result; ++i) result = co_await server.write_all(chunk);
  done = true;
}

asio::awaitable<void> half_close_exchange(TcpStream& client, TcpStream& server, ReadAll& at_server, ReadAll& at_client,
                                          bool& done) {
  const auto request = as_bytes("request");
  EXPECT_TRUE(co_await client.write_all(request));
  EXPECT_TRUE(co_await client.shutdown_write());
  at_server = co_await read_all(server);  // completes only if the FIN arrived
  // The half-closed client still receives the reply, then the server's own EOF.
  const auto reply = as_bytes("reply after eof");
  EXPECT_TRUE(co_await server.write_all(reply));
  EXPECT_TRUE(co_await server.shutdown_write());
  at_client = co_await read_all(client);
  done = true;
}

asio::awaitable<void> write_payload(TcpStream& client, const std::string& payload, bool& wrote) {
  const auto bytes = as_bytes(payload);
  EXPECT_TRUE(co_await client.write_all(bytes));
  EXPECT_TRUE(co_await client.shutdown_write());
  wrote = true;
}

// Writes `payload` as gathered writes of up to 16 parts of varied sizes (1 byte to 1 MiB, so some
// writes overrun the socket buffer and finish in Asio's write, starting mid-part), then EOF.
asio::awaitable<void> write_payload_in_parts(TcpStream& client, const std::string& payload, bool& wrote) {
  static constexpr std::array<std::size_t, 7> kSizes{1, 1000, 16'384, 3, 65'536, 1 << 20, 777};
  std::span<const std::byte> rest = as_bytes(payload);
  std::vector<std::span<const std::byte>> parts;
  for (std::size_t i = 0; !rest.empty(); ++i) {
    const std::size_t n = std::min(kSizes[i % kSizes.size()], rest.size());
    parts.push_back(rest.first(n));
    rest = rest.subspan(n);
    if (parts.size() == (i % OwnedBytes::kMaxParts) + 1 || rest.empty()) {
      auto written = co_await client.write_parts(parts);
      EXPECT_TRUE(written) << written.error().message();
      parts.clear();
    }
  }
  EXPECT_TRUE(co_await client.shutdown_write());
  wrote = true;
}

asio::awaitable<void> read_everything(TcpStream& server, ReadAll& got, bool& done) {
  got = co_await read_all(server);
  done = true;
}

asio::awaitable<void> read_under_deadline(asio::io_context& io, TcpStream& server, base::Result<std::size_t>& read,
                                          bool& expired, bool& done) {
  Deadline d(io.get_executor(), 20ms, [&] { server.socket().close(); });
  std::array<std::byte, 16> buf{};
  read = co_await server.read_some(buf);  // the client never writes
  expired = d.expired();
  done = true;
}

asio::awaitable<void> wait_once(Signal& signal, bool& woke) {
  co_await signal.wait();
  woke = true;
}

asio::awaitable<void> count_wakeups(Signal& signal, int& wakeups) {
  for (;;) {
    co_await signal.wait();
    ++wakeups;
  }
}

asio::awaitable<void> wait_readable_then_read(TcpStream& server, ReadAll& got, bool& woke, bool& done) {
  co_await server.wait_readable();
  woke = true;
  got = co_await read_all(server);
  done = true;
}

TEST(TcpStream, CleanCloseIsEofAfterData) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream client(std::move(pair.client));
  TcpStream server(std::move(pair.server));
  bool done = false;
  ReadAll got;
  asio::co_spawn(io, write_close_then_read(client, server, got, done), asio::detached);
  ASSERT_TRUE(run_until(io, done));
  EXPECT_EQ(got.data, "hello");
  ASSERT_TRUE(got.end) << got.end.error().message();
  EXPECT_EQ(*got.end, 0u);
}

TEST(TcpStream, PeerAbortIsReset) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  bool done = false;
  ReadAll got;
  asio::co_spawn(io, abort_peer_then_read(pair.client, server, got, done), asio::detached);
  ASSERT_TRUE(run_until(io, done));
  ASSERT_FALSE(got.end);
  EXPECT_EQ(got.end.error().code, base::Errc::kReset) << got.end.error().message();
}

TEST(TcpStream, ResetSendsRstToPeer) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream client(std::move(pair.client));
  TcpStream server(std::move(pair.server));
  bool done = false;
  ReadAll got;
  asio::co_spawn(io, reset_twice_then_read(client, server, got, done), asio::detached);
  ASSERT_TRUE(run_until(io, done));
  ASSERT_FALSE(got.end);
  EXPECT_EQ(got.end.error().code, base::Errc::kReset) << got.end.error().message();
}

TEST(TcpStream, WriteAfterPeerResetFailsWithReset) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  bool done = false;
  base::Result<void> write_result;
  asio::co_spawn(io, write_after_peer_reset(pair.client, server, write_result, done), asio::detached);
  ASSERT_TRUE(run_until(io, done));
  ASSERT_FALSE(write_result);
  EXPECT_EQ(write_result.error().code, base::Errc::kReset) << write_result.error().message();
}

TEST(TcpStream, ShutdownWriteGivesPeerEofWhileReadsContinue) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream client(std::move(pair.client));
  TcpStream server(std::move(pair.server));
  bool done = false;
  ReadAll at_server;
  ReadAll at_client;
  asio::co_spawn(io, half_close_exchange(client, server, at_server, at_client, done), asio::detached);
  ASSERT_TRUE(run_until(io, done));
  EXPECT_EQ(at_server.data, "request");
  ASSERT_TRUE(at_server.end);
  EXPECT_EQ(*at_server.end, 0u);
  EXPECT_EQ(at_client.data, "reply after eof");
  ASSERT_TRUE(at_client.end);
  EXPECT_EQ(*at_client.end, 0u);
}

// Sends `size` patterned bytes from a client TcpStream to a server one with `writer`, then EOF;
// returns what the server read (empty if the transfer did not finish within `limit`).
using PayloadWriter = asio::awaitable<void> (*)(TcpStream&, const std::string&, bool&);
void transfer(PayloadWriter writer, std::size_t size, std::chrono::seconds limit, std::string& payload,
              ReadAll& got) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream client(std::move(pair.client));
  TcpStream server(std::move(pair.server));
  payload.assign(size, '\0');
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 2654435761u) >> 13);
  bool wrote = false;
  bool done = false;
  asio::co_spawn(io, writer(client, payload, wrote), asio::detached);
  asio::co_spawn(io, read_everything(server, got, done), asio::detached);
  EXPECT_TRUE(run_until(io, done, limit));
  EXPECT_TRUE(wrote);
}

TEST(TcpStream, LargeTransferIsIntact) {
  std::string payload;
  ReadAll got;
  transfer(&write_payload, 4 << 20, 5s, payload, got);
  EXPECT_TRUE(got.data == payload);
}

TEST(TcpStream, GatheredWritesArriveInOrderAndIntact) {
  std::string payload;
  ReadAll got;
  transfer(&write_payload_in_parts, 12 << 20, 20s, payload, got);
  EXPECT_EQ(got.data.size(), payload.size());
  EXPECT_TRUE(got.data == payload) << "gathered parts arrived reordered or damaged";
}

TEST(Deadline, FiresOnceAfterTheDuration) {
  asio::io_context io;
  int fired = 0;
  auto start = std::chrono::steady_clock::now();
  Deadline d(io.get_executor(), 20ms, [&] { ++fired; });
  EXPECT_FALSE(d.expired());
  io.run_for(2s);  // returns as soon as the only pending operation (the timer) completed
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(d.expired());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  d.cancel();  // after firing: harmless
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(fired, 1);
}

TEST(Deadline, CancelPreventsFiring) {
  asio::io_context io;
  int fired = 0;
  Deadline d(io.get_executor(), 10ms, [&] { ++fired; });
  d.cancel();
  d.cancel();
  io.run_for(2s);
  EXPECT_EQ(fired, 0);
  EXPECT_FALSE(d.expired());
}

TEST(Deadline, CancelAfterExpiryButBeforeTheHandlerRunsPreventsFiring) {
  asio::io_context io;
  int fired = 0;
  Deadline d(io.get_executor(), 1ms, [&] { ++fired; });
  // Let the timer expire without running the io_context, so its completion is already due.
  auto until = std::chrono::steady_clock::now() + 5ms;
  while (std::chrono::steady_clock::now() < until) {
  }
  d.cancel();
  io.run_for(2s);
  EXPECT_EQ(fired, 0);
}

TEST(Deadline, DestructionCancels) {
  asio::io_context io;
  int fired = 0;
  {
    Deadline d(io.get_executor(), 1ms, [&] { ++fired; });
  }
  io.run_for(2s);
  EXPECT_EQ(fired, 0);
}

TEST(Deadline, ExpiryClosesTheAwaitedSocket) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  bool done = false;
  base::Result<std::size_t> read = 0;
  bool expired = false;
  asio::co_spawn(io, read_under_deadline(io, server, read, expired, done), asio::detached);
  ASSERT_TRUE(run_until(io, done));
  EXPECT_TRUE(expired);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, base::Errc::kClosed) << read.error().message();
}

TEST(Signal, NotifyBeforeWaitIsNotLost) {
  asio::io_context io;
  Signal signal;
  bool woke = false;
  signal.notify();
  asio::co_spawn(io, wait_once(signal, woke), asio::detached);
  ASSERT_TRUE(run_until(io, woke, 2s));
}

TEST(Signal, NotifyWakesAParkedWaiterAndIsConsumed) {
  asio::io_context io;
  Signal signal;
  int wakeups = 0;
  asio::co_spawn(io, count_wakeups(signal, wakeups), asio::detached);
  io.run_for(20ms);  // the waiter parks
  EXPECT_EQ(wakeups, 0);
  signal.notify();
  io.run_for(20ms);
  EXPECT_EQ(wakeups, 1);
  // The notification was consumed: the waiter parks again instead of spinning.
  io.run_for(20ms);
  EXPECT_EQ(wakeups, 1);
  // Notify from inside another handler between the waiter's wake-up and its next wait.
  asio::post(io, [&] { signal.notify(); });
  io.run_for(20ms);
  EXPECT_EQ(wakeups, 2);
}

// notify() never resumes the waiter inline (it runs inside nghttp2 callbacks): the wake-up is
// posted, and a parked waiter costs no timer (an idle HTTP/2 stream holds two Signals).
TEST(Signal, NotifyPostsTheWakeUpInsteadOfRunningTheWaiterInline) {
  static_assert(sizeof(Signal) <= 32, "a Signal is part of every idle tunnelled connection");
  asio::io_context io;
  Signal signal;
  bool woke = false;
  asio::co_spawn(io, wait_once(signal, woke), asio::detached);
  io.run_for(20ms);
  ASSERT_FALSE(woke);
  signal.notify();
  EXPECT_FALSE(woke);
  ASSERT_TRUE(run_until(io, woke, 2s));
}

// notify_inline() is for a caller whose own state the waiter cannot disturb (the HTTP/2 reader
// once nghttp2 has returned): the waiter runs before it returns, up to its next suspension.
TEST(Signal, NotifyInlineRunsTheWaiterBeforeReturning) {
  asio::io_context io;
  Signal signal;
  int wakeups = 0;
  asio::co_spawn(io, count_wakeups(signal, wakeups), asio::detached);
  io.run_for(20ms);  // the waiter parks
  ASSERT_EQ(wakeups, 0);
  bool checked = false;
  asio::post(io, [&] {
    signal.notify_inline();
    EXPECT_EQ(wakeups, 1) << "the waiter did not run inline";
    signal.notify_inline();  // it parked again: the second wakes it again, inline too
    EXPECT_EQ(wakeups, 2);
    checked = true;
  });
  ASSERT_TRUE(run_until(io, checked, 2s));
  io.run_for(20ms);
  EXPECT_EQ(wakeups, 2) << "no wake-up may be left queued behind";
  // With no waiter parked it is remembered, like notify().
  Signal later;
  bool woke = false;
  later.notify_inline();
  asio::co_spawn(io, wait_once(later, woke), asio::detached);
  ASSERT_TRUE(run_until(io, woke, 2s));
}

// Destroyed with a waiter parked, a Signal resumes it (as a destroyed timer did) rather than
// leaving its coroutine suspended for ever.
TEST(Signal, DestroyedWithAParkedWaiterResumesIt) {
  asio::io_context io;
  bool woke = false;
  auto signal = std::make_unique<Signal>();
  asio::co_spawn(io, wait_once(*signal, woke), asio::detached);
  io.run_for(20ms);
  ASSERT_FALSE(woke);
  signal.reset();
  ASSERT_TRUE(run_until(io, woke, 2s));
}

// The copy engine allocates no buffer before wait_readable() says there is something to read, so
// it must see bytes (and EOF) that arrived before the wait began: with Asio's edge-triggered
// epoll a plain async_wait would sleep through them.
TEST(TcpStream, WaitReadableSeesBytesAndEofThatArrivedBeforeTheWait) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));  // registered with the reactor (edge-triggered)
  asio::write(pair.client, asio::buffer(std::string_view("early")));
  pair.client.shutdown(tcp::socket::shutdown_send);
  // Let the reactor see (and drop) the readiness edges while nothing waits.
  for (int i = 0; i < 5; ++i) {
    io.restart();
    io.poll();
  }
  bool woke = false;
  bool done = false;
  ReadAll got;
  asio::co_spawn(io, wait_readable_then_read(server, got, woke, done), asio::detached);
  ASSERT_TRUE(run_until(io, woke, 2s)) << "wait_readable slept through bytes already received";
  ASSERT_TRUE(run_until(io, done));
  EXPECT_EQ(got.data, "early");
  ASSERT_TRUE(got.end.has_value());
  EXPECT_EQ(*got.end, 0u);
}

// Whether the peer's RST (or FIN) has arrived, by poll(2), which, unlike any recv, leaves the
// socket's pending error in place.
bool peer_end_arrived(TcpStream& s) {
  pollfd p{s.socket().native_handle(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLIN)) != 0;
}

// Reads `s` to its end on `io` (bytes, then EOF or the error).
ReadAll read_to_end(asio::io_context& io, TcpStream& s) {
  bool done = false;
  ReadAll got;
  asio::co_spawn(io, read_everything(s, got, done), asio::detached);
  EXPECT_TRUE(run_until(io, done));
  return got;
}

// read_now takes what is already here without waiting, and never swallows the end of the stream:
// the kernel reports a reset once, so one met by read_now must come back from the next read_some
// (else the copy engine would turn the peer's RST into a clean FIN).
TEST(TcpStream, ReadNowTakesWhatIsHereAndLeavesEofAndResetForReadSome) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  std::array<std::byte, 16> buf{};
  EXPECT_EQ(server.read_now(buf), 0u) << "nothing sent yet";
  asio::write(pair.client, asio::buffer(std::string_view("abcdef")));
  ASSERT_TRUE(testing_support::eventually([&] { return server.readable_now(); }));
  ASSERT_EQ(server.read_now(std::span(buf).first(4)), 4u);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(buf.data()), 4), "abcd");
  ASSERT_EQ(server.read_now(buf), 2u);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(buf.data()), 2), "ef");
  EXPECT_EQ(server.read_now(buf), 0u) << "drained";

  pair.client.set_option(asio::socket_base::linger(true, 0));
  pair.client.close();  // RST
  ASSERT_TRUE(testing_support::eventually([&] { return peer_end_arrived(server); }));
  EXPECT_EQ(server.read_now(buf), 0u) << "the reset is not reported here";
  const ReadAll got = read_to_end(io, server);
  ASSERT_FALSE(got.end) << "the reset read_now met became an EOF";
  EXPECT_EQ(got.end.error().code, base::Errc::kReset) << got.end.error().message();
}

// The copy engine peeks (readable_now) before its reads: a peer's RST that the peek meets must
// still come out of the read as a reset, or the other side would get a FIN for an aborted stream.
TEST(TcpStream, AResetSeenByReadableNowIsReportedByReadSome) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  pair.client.set_option(asio::socket_base::linger(true, 0));
  pair.client.close();  // RST
  ASSERT_TRUE(testing_support::eventually([&] { return server.readable_now(); }));
  EXPECT_TRUE(server.readable_now()) << "still readable: the reset is pending";
  const ReadAll got = read_to_end(io, server);
  ASSERT_FALSE(got.end) << "the peeked reset became an EOF";
  EXPECT_EQ(got.end.error().code, base::Errc::kReset) << got.end.error().message();
}

TEST(TcpStream, ReadNowLeavesACleanEofForReadSome) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  asio::write(pair.client, asio::buffer(std::string_view("x")));
  pair.client.shutdown(tcp::socket::shutdown_send);
  std::array<std::byte, 16> buf{};
  ASSERT_TRUE(testing_support::eventually([&] { return server.read_now(buf) == 1; }));
  EXPECT_EQ(server.read_now(buf), 0u);
  const ReadAll got = read_to_end(io, server);
  EXPECT_EQ(got.data, "");
  ASSERT_TRUE(got.end) << got.end.error().message();
  EXPECT_EQ(*got.end, 0u);
}

// Reads up to `count` messages (each read one message), waiting at `gate` after each, so the test
// decides whether the next message arrives while a read is queued or while none is.
asio::awaitable<void> read_gated(TcpStream& s, Signal& gate, std::vector<std::string>& got, std::size_t count,
                                 bool& done) {
  std::array<std::byte, 64> buf{};
  while (got.size() < count) {
    co_await s.wait_readable();
    auto n = co_await s.read_some(buf);
    if (!n || *n == 0) break;
    got.emplace_back(reinterpret_cast<const char*>(buf.data()), *n);
    co_await gate.wait();
  }
  done = true;
}

// wait_readable's peek, when it finds nothing, tells the reactor the socket is drained, and the
// wait it queues then costs no syscall (net/drained_read.hpp). No message may be missed: neither
// one that arrives while the wait is queued, nor one whose readiness the reactor saw while
// nothing was queued (the gate holds the reader between messages).
TEST(TcpStream, EveryMessageWakesAReaderThatWaitsForReadability) {
  asio::io_context io;
  TcpPair pair(io);
  TcpStream server(std::move(pair.server));
  Signal gate;
  std::vector<std::string> got;
  bool done = false;
  constexpr std::size_t kMessages = 40;
  asio::co_spawn(io, read_gated(server, gate, got, kMessages, done), asio::detached);
  for (std::size_t i = 0; i < kMessages; ++i) {
    const std::string message = "message " + std::to_string(i);
    const bool read_queued_first = i % 3 != 2;
    if (read_queued_first) {
      if (i > 0) gate.notify();
      for (int k = 0; k < 5; ++k) {  // the reader runs and queues its wait
        io.restart();
        io.poll();
      }
    }
    asio::write(pair.client, asio::buffer(message));
    if (!read_queued_first) {
      ASSERT_TRUE(testing_support::eventually([&] { return peer_end_arrived(server); }));
      for (int k = 0; k < 5; ++k) {  // the reactor sees the bytes while nothing is queued
        io.restart();
        io.poll();
      }
      gate.notify();
    }
    ASSERT_TRUE(run_until_true(io, [&] { return got.size() == i + 1; })) << "message " << i << " never read";
    EXPECT_EQ(got[i], message);
  }
  gate.notify();
  EXPECT_TRUE(run_until(io, done));
}

// wait_readable's queued peek meets the peer's end itself: a FIN must still come out of the read
// as EOF (the reactor reports it only once), and an RST as a reset (the peek took the error).
TEST(TcpStream, AnEofOrResetThatEndsAWaitIsReportedByTheRead) {
  for (const bool abort : {false, true}) {
    asio::io_context io;
    TcpPair pair(io);
    TcpStream server(std::move(pair.server));
    bool woke = false;
    bool done = false;
    ReadAll got;
    asio::co_spawn(io, wait_readable_then_read(server, got, woke, done), asio::detached);
    for (int k = 0; k < 5; ++k) {  // the wait is queued before the peer's end arrives
      io.restart();
      io.poll();
    }
    ASSERT_FALSE(woke);
    if (abort) pair.client.set_option(asio::socket_base::linger(true, 0));
    pair.client.close();
    ASSERT_TRUE(run_until(io, done)) << (abort ? "reset" : "eof") << " after the wait: the read never ended";
    EXPECT_TRUE(woke);
    if (abort) {
      ASSERT_FALSE(got.end) << "the reset became an EOF";
      EXPECT_EQ(got.end.error().code, base::Errc::kReset) << got.end.error().message();
    } else {
      ASSERT_TRUE(got.end) << got.end.error().message();
      EXPECT_EQ(*got.end, 0u);
    }
  }
}

}  // namespace
}  // namespace meshnode::net
