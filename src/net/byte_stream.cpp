#include "net/byte_stream.hpp"

#include "net/awaitable.hpp"
#include "net/drained_read.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <utility>
#include <vector>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

namespace meshnode::net {
namespace {

base::Error to_error(const std::error_code& ec, const char* what) {
  if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe) {
    return base::Error{base::Errc::kReset, what, ec};
  }
  if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
    return base::Error{base::Errc::kClosed, what, ec};
  }
  return base::Error{base::Errc::kIo, what, ec};
}

}  // namespace

asio::awaitable<base::Result<std::size_t>> TcpStream::read_some(std::span<std::byte> buf) {
  if (deferred_errno_ != 0) {
    const std::error_code ec(std::exchange(deferred_errno_, 0), asio::error::get_system_category());
    co_return std::unexpected(to_error(ec, "tcp read"));
  }
  if (peeked_eof_) co_return 0;
  const auto into = asio::buffer(buf.data(), buf.size());
  auto [ec, n] = co_await socket_.async_read_some(into, kNoThrow);
  if (ec == asio::error::eof) co_return 0;
  if (ec) co_return std::unexpected(to_error(ec, "tcp read"));
  co_return n;
}

asio::awaitable<base::Result<void>> TcpStream::write_all(std::span<const std::byte> data) {
  // Sent here first: when the socket takes it all (the common case), the caller goes on without
  // the scheduler hop (and the extra epoll_wait) of an Asio write completing immediately. One
  // attempt only: a socket that took part of it is full, and another send here would only fail
  // with EAGAIN; Asio's write (whose own first try may meet that EAGAIN once) waits for room.
  if (!data.empty() && socket_.is_open()) {
    ssize_t n;
    do n = ::send(socket_.native_handle(), data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      data = data.subspan(static_cast<std::size_t>(n));
      if (data.empty()) co_return base::Result<void>{};
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      const std::error_code ec(errno, asio::error::get_system_category());
      co_return std::unexpected(to_error(ec, "tcp write"));
    }
  }
  const auto from = asio::buffer(data.data(), data.size());
  auto [ec, n] = co_await asio::async_write(socket_, from, kNoThrow);
  if (ec) co_return std::unexpected(to_error(ec, "tcp write"));
  co_return base::Result<void>{};
}

asio::awaitable<base::Result<void>> ByteStream::write_parts(std::span<const std::span<const std::byte>> parts) {
  for (const std::span<const std::byte> part : parts) {
    auto written = co_await write_all(part);
    if (!written) co_return written;
  }
  co_return base::Result<void>{};
}

asio::awaitable<base::Result<void>> TcpStream::write_parts(std::span<const std::span<const std::byte>> parts) {
  // As write_all: one attempt here, Asio's write for what the socket did not take.
  std::size_t head_sent = 0;  // bytes of parts.front() already sent
  if (!parts.empty() && socket_.is_open()) {
    std::array<iovec, OwnedBytes::kMaxParts> iov;
    const std::size_t count = std::min(parts.size(), iov.size());
    for (std::size_t i = 0; i < count; ++i) iov[i] = {const_cast<std::byte*>(parts[i].data()), parts[i].size()};
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = count;
    ssize_t n;
    do n = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      auto sent = static_cast<std::size_t>(n);
      while (!parts.empty() && sent >= parts.front().size()) {
        sent -= parts.front().size();
        parts = parts.subspan(1);
      }
      head_sent = sent;
      if (parts.empty()) co_return base::Result<void>{};
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      const std::error_code ec(errno, asio::error::get_system_category());
      co_return std::unexpected(to_error(ec, "tcp write"));
    }
  }
  if (parts.empty()) co_return base::Result<void>{};
  std::vector<asio::const_buffer> rest;
  rest.reserve(parts.size());
  for (const std::span<const std::byte> part : parts) rest.emplace_back(part.data(), part.size());
  rest.front() += head_sent;
  auto [ec, n] = co_await asio::async_write(socket_, rest, kNoThrow);
  if (ec) co_return std::unexpected(to_error(ec, "tcp write"));
  co_return base::Result<void>{};
}

asio::awaitable<base::Result<void>> TcpStream::shutdown_write() {
  std::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (ec && ec != asio::error::not_connected) co_return std::unexpected(to_error(ec, "tcp shutdown"));
  co_return base::Result<void>{};
}

asio::awaitable<void> ready_now() { co_return; }

asio::awaitable<void> ByteStream::wait_readable() { co_return; }

asio::awaitable<void> TcpStream::wait_readable() {
  // Peek first: Asio's epoll registration is edge-triggered, so readiness that arrived before
  // this wait was queued (e.g. the request sent right after connect) would not wake it. Nothing
  // runs on this thread between the peek and queuing the wait, so no edge is lost after it.
  if (!socket_.is_open() || readable_now()) return ready_now();
  // Not a coroutine: an idle connection waits here for hours, and a frame of its own would live
  // that long. The wait is a queued one-byte MSG_PEEK, not async_wait: readable_now's EAGAIN told
  // the reactor the socket is drained, so queuing it costs no syscall, where async_wait re-arms
  // the epoll registration (EPOLL_CTL_MOD, and a spurious EPOLLOUT at the next wake-up). Its
  // completion ends the awaitable with no value. What it met is kept as readable_now keeps it:
  // an error for the next read_some (the peek took it off the socket), and EOF, since the reactor
  // reports it only once and would not wake a later read for it. A closed or cancelled wait
  // ends the awaitable too, and the read that follows reports it. The waiter's cancellation
  // slot is passed on, so a DrainScope cancel still ends the wait.
  return asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
      [this](auto waiter) {
        auto slot = asio::get_associated_cancellation_slot(waiter);
        socket_.async_receive(
            asio::mutable_buffer(&peeked_, 1), MSG_PEEK,
            asio::bind_cancellation_slot(slot, [this, waiter = std::move(waiter)](const std::error_code& ec,
                                                                                   std::size_t) mutable {
              if (ec == asio::error::eof) {
                peeked_eof_ = true;
              } else if (ec && ec != asio::error::operation_aborted && ec.category() == asio::error::get_system_category()) {
                // Reported once by read_some; reads after it see the end, as Asio now considers
                // the socket drained and no new edge would wake them.
                deferred_errno_ = ec.value();
                peeked_eof_ = true;
              }
              std::move(waiter)();
            }));
      },
      asio::use_awaitable);
}

bool TcpStream::readable_now() {
  if (!socket_.is_open() || deferred_errno_ != 0 || peeked_eof_) return true;
  // EAGAIN also marks the socket drained: the wait that follows then costs no syscall.
  const ssize_t n = peek_noting_drained(socket_);
  if (n >= 0) return true;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
  // Even a peek takes the pending error off the socket (ECONNRESET is reported once): kept for
  // read_some, or the peer's RST would come out of the next read as a clean EOF.
  deferred_errno_ = errno;
  return true;
}

std::size_t TcpStream::read_now(std::span<std::byte> buf) {
  if (buf.empty() || deferred_errno_ != 0 || peeked_eof_ || !socket_.is_open()) return 0;
  const ssize_t n = recv_noting_drained(socket_, buf.data(), buf.size());
  if (n > 0) return static_cast<std::size_t>(n);
  if (n == 0) return 0;  // EOF stays: the next recv sees it again
  if (errno != EAGAIN && errno != EWOULDBLOCK) deferred_errno_ = errno;
  return 0;
}

void TcpStream::reset() {
  std::error_code ec;
  if (!socket_.is_open()) return;
  socket_.set_option(asio::socket_base::linger(true, 0), ec);
  socket_.close(ec);
}

asio::awaitable<void> Signal::wait() {
  if (pending_) {
    pending_ = false;
    return ready_now();
  }
  return asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
      [this](Waiter waiter) {
        // One waiter at a time (every owner has one reader or one writer per Signal): a second
        // would replace the first, whose coroutine would then never resume. Checked in debug
        // builds, where every test runs.
        assert(!waiter_ && "net::Signal: a second coroutine waits while one is parked");
        waiter_.emplace(std::move(waiter));
      },
      asio::use_awaitable);
}

std::optional<Signal::Waiter> Signal::take_waiter() {
  if (!waiter_) {
    pending_ = true;
    return std::nullopt;
  }
  return std::exchange(waiter_, std::nullopt);
}

void Signal::notify() {
  if (auto waiter = take_waiter()) asio::post(std::move(*waiter));
}

void Signal::notify_inline() {
  if (auto waiter = take_waiter()) asio::dispatch(std::move(*waiter));
}

Signal::~Signal() {
  if (waiter_) asio::post(std::move(*waiter_));
}

}  // namespace meshnode::net
