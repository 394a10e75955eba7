#pragma once

#include <cstddef>

namespace asio {
class io_context;
}

namespace meshnode::net {

// Asio's epoll reactor keeps one record (epoll_reactor::descriptor_state, 168 B) per socket it
// has ever had open at once, and never frees one: an event that epoll returned for a socket may
// still be queued when the socket closes, so Asio keeps the records type-stable on a free list.
// After a peak of 10,000 connections that is ~1.4 MB resident for the rest of the process's life
// (bench/soak.sh, issue 11). These functions give them back, on threads where it is provably
// safe; implemented in asio_impl.cpp, next to the Asio internals they rely on.

/// Declares that the calling thread is the only thread that ever runs `io` (a proxy worker), and
/// that `io` outlives the thread. Records of `io`'s sockets that this thread frees while running
/// `io` then become reclaimable by `release_idle_reactor_records`; records freed anywhere else stay
/// on Asio's free list, as before. Call on that thread before `io.run()`.
void reclaim_reactor_records_on_this_thread(asio::io_context& io);

/// Frees the reactor records that this thread's sockets freed before this call and that no new
/// socket took since (a new socket reuses one first), in two steps on `io`, which must be the io_context given to
/// `reclaim_reactor_records_on_this_thread` (call from one of its handlers; otherwise nothing
/// happens):
/// 1. now: marks those records;
/// 2. in a handler posted to `io`: deletes the marked ones that no new socket took meanwhile.
/// Why it is safe: `io`'s scheduler runs handlers in FIFO order on this one thread, so by step 2
/// every event that epoll returned before step 1 has been handled; and a record is freed only after
/// its socket left the epoll set, so no later epoll_wait can return it: Asio removes a socket it
/// got through `assign` (every socket of the proxy, accepted ones included) with EPOLL_CTL_DEL at
/// close, whatever other fd refers to it (the inbound handshake limiter holds a dup).
void release_idle_reactor_records(asio::io_context& io);

/// Process-wide counts of reactor records, for tests and /debug/memory.
struct ReactorRecordStats {
  std::size_t created = 0;    ///< records allocated since start
  std::size_t destroyed = 0;  ///< records given back to the allocator by release_idle_reactor_records
  std::size_t retired = 0;    ///< records freed by their socket and waiting (reusable, or reclaimable)
};
[[nodiscard]] ReactorRecordStats reactor_record_stats();

}  // namespace meshnode::net
