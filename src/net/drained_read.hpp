#pragma once

#include <sys/types.h>

#include <cstddef>
#include <asio/ip/tcp.hpp>

namespace meshnode::net {

// Why: Asio 1.22's epoll reactor (edge-triggered) starts a read by trying recv(2) unless it has
// seen the socket drained, and a readiness wait (async_wait) always re-arms the registration
// (EPOLL_CTL_MOD with an unchanged mask, which also makes the next wake-up report a spurious
// EPOLLOUT). A recv of our own that fails with EAGAIN has seen the socket drained: these
// functions tell the reactor so, under the lock of the socket's reactor record, and a read
// queued right after then waits for epoll at no syscall. That makes "recv, then wait" cost one
// call where it cost two (issue 15). Only EAGAIN marks it: a short read may leave a FIN or an RST
// behind it, for which no new edge would come. Safe under edge-triggered epoll because bytes,
// FIN or RST arriving after the EAGAIN raise a new edge, and the reactor marks the socket
// readable again when it handles it; the lock keeps an edge handled on another thread from being
// lost. Implemented in asio_impl.cpp, next to the Asio internals it relies on.

/// recv(2) of up to `size` bytes with MSG_DONTWAIT (retried on EINTR); EAGAIN marks `socket`
/// drained for its reactor. @returns recv's result, with errno as recv left it.
ssize_t recv_noting_drained(asio::ip::tcp::socket& socket, void* data, std::size_t size) noexcept;

/// A one-byte MSG_PEEK, as recv_noting_drained.
ssize_t peek_noting_drained(asio::ip::tcp::socket& socket) noexcept;

}  // namespace meshnode::net
