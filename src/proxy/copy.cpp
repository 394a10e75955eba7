#include "proxy/copy.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <cstring>
#include <exception>
#include <memory>
#include <span>

#include "net/thread_entry.hpp"

namespace meshnode::proxy {
namespace {

constexpr std::size_t kSmall = 1024;
constexpr std::size_t kMedium = 16 * 1024 - 64;
// Half of ztunnel's 256 KiB: a sender proxy under 4 busy pods held 4 of them at its memory peak
// (issue 15: VmHWM 17.2-17.6 MB of a 16 MB target; 13.4-15.0 MB at 128 KiB with the h2 write
// batch at 128 KiB too, 14.6-16.5 MB with only the batch at 128 KiB). The price, measured
// against a TLS relay in the same cluster: roughly 10 % more proxy CPU per GB in bulk (median
// of 6 alternating pairs, ranges overlapping).
constexpr std::size_t kLarge = 128 * 1024 - 64;
constexpr std::uint64_t kMediumAfter = 128 * 1024;
constexpr std::uint64_t kLargeAfter = 10 * 1024 * 1024;

// Where one direction counts its bytes and puts its error: the caller's Transferred, so that the
// copy's frames hold no outcome of their own.
struct Direction {
  std::uint64_t& bytes;
  std::optional<base::Error>& error;
};

// The read size for a direction that has moved `bytes` so far (ztunnel's schedule, but kLarge).
std::size_t read_size(std::uint64_t bytes) {
  return bytes >= kLargeAfter ? kLarge : bytes >= kMediumAfter ? kMedium : kSmall;
}

enum class Step { kMore, kEof, kFailed };

// A small read that came back full is most likely the head of a bigger message (an HTTP request
// of 1 KiB body plus headers): takes the rest that is already here into a 16 KiB buffer, so the
// message goes on as one write (one DATA frame, one TLS record, one send) instead of two.
// `buf`/`size` are the caller's buffer, swapped for the bigger one when there is more; returns
// the bytes now held.
std::size_t gather_rest(net::ByteStream& from, std::unique_ptr<std::byte[]>& buf, std::size_t& size,
                        std::size_t held) {
  std::array<std::byte, kSmall> probe;  // no 16 KiB allocation for a message of exactly 1 KiB
  const std::size_t more = from.read_now(probe);
  if (more == 0) return held;
  auto bigger = std::make_unique_for_overwrite<std::byte[]>(kMedium);
  std::memcpy(bigger.get(), buf.get(), held);
  std::memcpy(bigger.get() + held, probe.data(), more);
  held += more;
  if (more == probe.size()) held += from.read_now(std::span(bigger.get() + held, kMedium - held));
  buf = std::move(bigger);
  size = kMedium;
  return held;
}

// One read and the write of what it read. A coroutine of its own so that the frame an idle
// connection holds per direction (copy_one_way's, waiting for readability) carries none of the
// read and write results: GCC 12 gives every local of a coroutine, and the result of every
// co_await, a slot in the frame for the coroutine's whole life (issue 15, idle memory).
// `read` gets the bytes this read took (the caller sizes its next read by it).
asio::awaitable<Step> pump(net::ByteStream& from, net::ByteStream& to, std::unique_ptr<std::byte[]>& buf,
                           std::size_t& size, std::size_t& read, Direction& d, telemetry::Counter* counter) {
  auto n = co_await from.read_some(std::span(buf.get(), size));
  if (!n) {
    d.error = std::move(n.error());
    co_return Step::kFailed;
  }
  if (*n == 0) {
    auto shut = co_await to.shutdown_write();
    if (!shut) d.error = std::move(shut.error());
    co_return Step::kEof;
  }
  if (*n == size && size == kSmall) *n = gather_rest(from, buf, size, *n);
  read = *n;
  auto written = co_await to.write_all(std::span(buf.get(), *n));
  if (!written) {
    d.error = std::move(written.error());
    co_return Step::kFailed;
  }
  d.bytes += *n;
  if (counter != nullptr) counter->inc(*n);
  co_return Step::kMore;
}

// pump() for a source that lends its input (an HTTP/2 stream): its received blocks are written
// on as they are, one gathered write, with no copy into a buffer of ours. Called once the source
// is readable: with nothing held, EOF or an error is pending, and pump() reports it at once.
asio::awaitable<Step> pump_lent(net::ByteStream& from, net::ByteStream& to, Direction& d, telemetry::Counter* counter) {
  net::OwnedBytes input;
  const std::size_t n = from.take_input(input);
  if (n == 0) {
    auto small = std::make_unique_for_overwrite<std::byte[]>(kSmall);
    std::size_t size = kSmall;
    std::size_t read = 0;
    co_return co_await pump(from, to, small, size, read, d, counter);
  }
  auto written = co_await to.write_parts(input.parts());
  if (!written) {
    d.error = std::move(written.error());
    co_return Step::kFailed;
  }
  d.bytes += n;
  if (counter != nullptr) counter->inc(n);
  co_return Step::kMore;
}

// Copies `from` to `to` until EOF (then half-closes `to`) or a failure (then resets both); the
// outcome goes to `d`, not to a return value, which would take a slot in this long-lived frame
// and in the frame of the co_spawn that runs one of the directions.
asio::awaitable<void> copy_one_way(net::ByteStream& from, net::ByteStream& to, telemetry::Counter* counter,
                                   Direction& d) {
  // No buffer before the first byte, and no 16 or 128 KiB buffer while the source has nothing to
  // read: idle and stalled connections then hold at most 1 KiB per direction, whatever they moved
  // before (a peer that stalls after 10 MiB pinned 256 KiB). Readiness is checked before each
  // read at the big sizes only (a peek on TCP, nothing on HTTP/2), so a small request/response
  // exchange costs no extra call. The buffer is freed after its write completed, so nothing in it
  // is needed any more; never zeroed, since each read overwrites it.
  //
  // After a read that took less than a medium buffer (request/response traffic: the source is
  // drained), the next read waits in a small buffer whatever the direction moved before: on TCP a
  // read that waits costs a speculative recv and the recv when the bytes come (Asio's
  // edge-triggered epoll needs no re-arm for it), a wait by readiness two calls more (the peeks
  // below), per message. A small read that comes back full
  // gathers the rest. Such a connection, once idle, holds that 1 KiB buffer per direction.
  std::unique_ptr<std::byte[]> buf;
  std::size_t size = 0;
  std::size_t last = 0;  // bytes of the previous read
  co_await from.wait_readable();
  // An HTTP/2 stream already holds what it received, in blocks of its own: they are written on
  // as they are (issue 15: the copy out of them was 2.6 % of a bulk receiver's CPU), and the
  // direction holds no buffer at all while it waits.
  if (from.lends_input()) {
    for (;;) {
      while (!from.readable_now()) co_await from.wait_readable();
      const Step step = co_await pump_lent(from, to, d, counter);
      if (step == Step::kEof) co_return;
      if (step == Step::kFailed) break;
    }
  } else {
    for (bool first = true;; first = false) {
      const std::size_t want = first || last < kMedium ? kSmall : read_size(d.bytes);
      if (!first && want > kSmall && !from.readable_now()) {
        buf.reset();
        // A spurious wake-up must not allocate (and then hold, waiting in the read) a big buffer.
        do co_await from.wait_readable();
        while (!from.readable_now());
      }
      if (!buf || size != want) {
        size = want;
        buf = std::make_unique_for_overwrite<std::byte[]>(size);
      }
      const Step step = co_await pump(from, to, buf, size, last, d, counter);
      if (step == Step::kEof) co_return;
      if (step == Step::kFailed) break;
    }
  }
  // One side failed: the connection is over in both directions; propagate as resets.
  from.reset();
  to.reset();
}

// The direction copy_bidirectional runs on a thread of its own, and how it ended; in the parent's
// frame, which joins it before ending.
struct Spawned {
  net::ByteStream& from;
  net::ByteStream& to;
  telemetry::Counter* counter;
  std::uint64_t& bytes;
  std::optional<base::Error> error;  // merged into the Transferred once joined
  bool finished = false;
  net::Signal done;
};

// Ends the connection after an exception escaped the spawned direction; the exception comes back
// to the parent as the direction's error. A plain function: its temporaries would otherwise take
// slots in the thread's frame for the connection's whole life.
void fail(Spawned& child, const std::exception_ptr& e) noexcept {
  child.error =
      base::Error{base::Errc::kInternal, "copy upstream -> downstream failed: " + base::exception_message(e)};
  spdlog::error("copy\ttask failed\terror=\"{}\"", child.error->context);
  child.from.reset();
  child.to.reset();
}

// The spawned direction's thread (net::launch: a co_spawn entry frame would cost 448 B per
// connection).
net::ThreadEntry run_spawned(Spawned* child) {
  Direction d{child->bytes, child->error};
  try {
    co_await copy_one_way(child->from, child->to, child->counter, d);
  } catch (...) {
    fail(*child, std::current_exception());
  }
  child->finished = true;
  child->done.notify();
}

}  // namespace

asio::awaitable<void> copy_bidirectional(net::ByteStream& downstream, net::ByteStream& upstream,
                                         telemetry::Counter* to_upstream, telemetry::Counter* to_downstream,
                                         Transferred& moved) {
  // The server → client direction runs as a thread of its own, the other one inline; this costs
  // about 2 KB less per connection than awaitable_operators' `&&` (which spawns both and keeps a
  // parallel group), and idle connections are what this memory is multiplied by. A structured
  // child, joined below before this frame ends (so not a DrainScope task).
  Spawned down{upstream, downstream, to_downstream, moved.upstream_to_downstream};
  co_await net::launch_here(run_spawned(&down));
  Direction up{moved.downstream_to_upstream, moved.error};
  co_await copy_one_way(downstream, upstream, to_upstream, up);
  // The spawned direction refers to this frame: it must end before this coroutine returns.
  while (!down.finished) co_await down.done.wait();
  // The first error of either direction; this one's when both failed.
  if (!moved.error) moved.error = std::move(down.error);
}

}  // namespace meshnode::proxy
