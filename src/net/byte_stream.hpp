#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>

#include <cstddef>
#include <optional>
#include <span>

#include "base/error.hpp"
#include "net/owned_bytes.hpp"

namespace meshnode::net {

/// One direction-independent byte stream: a TCP socket, or one HTTP/2 CONNECT stream.
/// Contract shared by every implementation (the copy engine relies on it):
/// - `read_some` returns 1..buf.size() bytes, 0 on a clean EOF (FIN / END_STREAM), Errc::kReset when
///   the peer reset (TCP RST / RST_STREAM), other errors otherwise;
/// - `write_all` writes everything or fails; `shutdown_write` sends EOF (FIN / END_STREAM) and keeps
///   the read side open; `reset` aborts both directions (TCP RST / RST_STREAM) and wakes pending ops.
/// Single-threaded: call from the io_context thread that owns the stream; at most one read and one
/// write outstanding.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual asio::awaitable<base::Result<std::size_t>> read_some(std::span<std::byte> buf) = 0;
  virtual asio::awaitable<base::Result<void>> write_all(std::span<const std::byte> data) = 0;
  virtual asio::awaitable<base::Result<void>> shutdown_write() = 0;
  virtual void reset() = 0;
  /// Completes once `read_some` would not wait (bytes, EOF, a reset or an error are pending), or
  /// spuriously (an HTTP/2 stream wakes for its response headers too): a caller that must not
  /// allocate for nothing re-checks `readable_now()`. Lets a reader allocate its buffer only when
  /// there is something to read: an idle connection then holds no read buffer. The default
  /// completes at once (always correct, saves nothing).
  virtual asio::awaitable<void> wait_readable();
  /// Whether `read_some` would complete without waiting, now. Lets a reader give its buffer back
  /// while the stream has nothing for it. The default says true (always correct, saves nothing).
  [[nodiscard]] virtual bool readable_now() { return true; }
  /// Takes up to buf.size() bytes that are already here, without waiting: the bytes taken, or 0
  /// when nothing is pending. EOF and errors are never reported here: they stay for the next
  /// `read_some` (a reader that gets 0 simply reads again). Lets a reader whose small buffer came
  /// back full gather the rest of a burst into one write. The default takes nothing.
  [[nodiscard]] virtual std::size_t read_now(std::span<std::byte> /*buf*/) { return 0; }
  /// Hands over received bytes the stream already holds in memory blocks of its own, without
  /// copying them (an HTTP/2 stream's DATA; their flow-control credit is returned, as by
  /// read_some): as many as `into` has room for, appended to it; returns the bytes, 0 when none
  /// are held. EOF and errors stay for `read_some`. The default holds nothing.
  [[nodiscard]] virtual std::size_t take_input(OwnedBytes& /*into*/) { return 0; }
  /// True when take_input hands over everything read_some would read: a reader then waits with
  /// wait_readable (which costs such a stream no system call) and takes the bytes in place,
  /// holding no buffer of its own.
  [[nodiscard]] virtual bool lends_input() const noexcept { return false; }
  /// Writes `parts` in order, all of them or fails, as write_all: one gathered send where the
  /// transport has one (TCP: sendmsg), else write_all per part (the default).
  virtual asio::awaitable<base::Result<void>> write_parts(std::span<const std::span<const std::byte>> parts);
};

/// ByteStream over a connected TCP socket. `reset()` closes with SO_LINGER 0 so the peer sees RST.
class TcpStream final : public ByteStream {
 public:
  explicit TcpStream(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}

  asio::awaitable<base::Result<std::size_t>> read_some(std::span<std::byte> buf) override;
  asio::awaitable<base::Result<void>> write_all(std::span<const std::byte> data) override;
  /// One sendmsg of all parts first (as write_all's one send), then Asio's gathered write.
  asio::awaitable<base::Result<void>> write_parts(std::span<const std::span<const std::byte>> parts) override;
  asio::awaitable<base::Result<void>> shutdown_write() override;
  void reset() override;
  asio::awaitable<void> wait_readable() override;
  /// One MSG_PEEK recv: bytes, EOF or an error pending. An error the peek meets (ECONNRESET...)
  /// is kept and returned by the next read_some: the kernel reports a reset only once, even to a
  /// peek, and a later recv would see a plain EOF.
  [[nodiscard]] bool readable_now() override;
  /// One non-blocking recv. An error it meets is kept for read_some, as readable_now's.
  [[nodiscard]] std::size_t read_now(std::span<std::byte> buf) override;

  asio::ip::tcp::socket& socket() noexcept { return socket_; }

 private:
  asio::ip::tcp::socket socket_;
  int deferred_errno_ = 0;  ///< an error a peek or read_now met, for the next read_some
  bool peeked_eof_ = false;  ///< wait_readable's peek met EOF, which the reactor then sees no more
  std::byte peeked_;         ///< where wait_readable's queued peek puts the byte it leaves in place
};

/// A level-triggered wake-up for one waiting coroutine on a single-threaded io_context:
/// `notify()` before `wait()` is remembered, so no wake-up is lost. The parked waiter is the
/// coroutine's own completion handler (no timer, no executor): 32 bytes, where a steady_timer
/// based one took 128, and an idle HTTP/2 stream holds two (issue 15, idle memory).
/// Not a cancellation point: a parked wait ends only by notify() (every owner notifies when it
/// resets or closes). Destroyed with a waiter parked, it resumes the waiter (as a destroyed timer
/// would), so the waiter must not touch the Signal's owner after waking without checking it.
class Signal {
 public:
  Signal() = default;
  ~Signal();
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

  /// Completes at once (without a scheduler hop) if notified since the last wait, else on the next
  /// notify(). At most one waiter at a time (asserted in debug builds).
  asio::awaitable<void> wait();
  /// Wakes the waiter (posted to its executor, never run inline), or remembers the notification.
  void notify();
  /// As notify(), but a waiter runs on this thread before this returns, up to its next
  /// suspension: one scheduler pass sooner (asio::dispatch; called from outside a run() of the
  /// waiter's io_context on this thread, it is posted like notify()). Only for a caller whose own
  /// state cannot be disturbed by whatever the waiter does next (never from inside an nghttp2
  /// callback). The waiter may destroy the Signal: the caller keeps its owner alive.
  void notify_inline();
  /// Forgets a remembered notification: for a waiter that has just checked its condition itself
  /// and found it false, an earlier notify() is stale and would only wake it for nothing.
  void clear() noexcept { pending_ = false; }

 private:
  using Waiter = asio::async_result<asio::use_awaitable_t<>, void()>::handler_type;
  /// The parked waiter, now unparked; none (and the notification remembered) if none is parked.
  std::optional<Waiter> take_waiter();
  std::optional<Waiter> waiter_;
  bool pending_ = false;
};

}  // namespace meshnode::net
