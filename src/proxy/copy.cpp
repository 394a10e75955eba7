#include "proxy/copy.hpp"

#include <asio/co_spawn.hpp>
#include <asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <exception>
#include <memory>

namespace meshnode::proxy {
namespace {

constexpr std::size_t kSmall = 1024;
constexpr std::size_t kMedium = 16 * 1024 - 64;
constexpr std::size_t kLarge = 256 * 1024 - 64;
constexpr std::uint64_t kMediumAfter = 128 * 1024;
constexpr std::uint64_t kLargeAfter = 10 * 1024 * 1024;

struct Direction {
  std::uint64_t bytes = 0;
  std::optional<base::Error> error;
};

// The read size for a direction that has moved `bytes` so far (ztunnel's schedule).
std::size_t read_size(std::uint64_t bytes) {
  return bytes >= kLargeAfter ? kLarge : bytes >= kMediumAfter ? kMedium : kSmall;
}

asio::awaitable<Direction> copy_one_way(net::ByteStream& from, net::ByteStream& to, telemetry::Counter* counter) {
  Direction d;
  // No buffer before the first byte, and no 16 or 256 KiB buffer while the source has nothing to
  // read: idle and stalled connections then hold at most 1 KiB per direction, whatever they moved
  // before (a peer that stalls after 10 MiB pinned 256 KiB). Readiness is checked before each
  // read at the big sizes only (a peek on TCP, nothing on HTTP/2), so a small request/response
  // exchange costs no extra call. The buffer is freed after its write completed, so nothing in it
  // is needed any more; never zeroed, since each read overwrites it.
  std::unique_ptr<std::byte[]> buf;
  std::size_t size = 0;
  co_await from.wait_readable();
  for (bool first = true;; first = false) {
    const std::size_t want = read_size(d.bytes);
    if (!first && want > kSmall && !from.readable_now()) {
      buf.reset();
      co_await from.wait_readable();
    }
    if (!buf || size != want) {
      size = want;
      buf = std::make_unique_for_overwrite<std::byte[]>(size);
    }
    auto n = co_await from.read_some(std::span(buf.get(), size));
    if (!n) {
      d.error = n.error();
      break;
    }
    if (*n == 0) {
      auto shut = co_await to.shutdown_write();
      if (!shut) d.error = shut.error();
      co_return d;
    }
    const auto filled = std::span<const std::byte>(buf.get(), *n);
    auto written = co_await to.write_all(filled);
    if (!written) {
      d.error = written.error();
      break;
    }
    d.bytes += *n;
    if (counter != nullptr) counter->inc(*n);
  }
  // One side failed: the connection is over in both directions; propagate as resets.
  from.reset();
  to.reset();
  co_return d;
}

}  // namespace

asio::awaitable<Transferred> copy_bidirectional(net::ByteStream& downstream, net::ByteStream& upstream,
                                                telemetry::Counter* to_upstream, telemetry::Counter* to_downstream) {
  // The server → client direction runs as its own coroutine, the other one inline; this costs
  // about 2 KB less per connection than awaitable_operators' `&&` (which spawns both and keeps a
  // parallel group), and idle connections are what this memory is multiplied by.
  auto ex = co_await asio::this_coro::executor;
  net::Signal done;
  Direction down;
  bool down_finished = false;
  // A structured child, joined below before this frame ends (so not a DrainScope task): its
  // result, or the exception that ended it, comes back through the completion handler.
  asio::co_spawn(ex, copy_one_way(upstream, downstream, to_downstream),
                 [&](std::exception_ptr e, Direction d) {
                   if (e) {
                     d.error = base::Error{base::Errc::kInternal, "copy upstream -> downstream failed: " + base::exception_message(e)};
                     spdlog::error("copy\ttask failed\terror=\"{}\"", d.error->context);
                     upstream.reset();
                     downstream.reset();
                   }
                   down = std::move(d);
                   down_finished = true;
                   done.notify();
                 });
  Direction up = co_await copy_one_way(downstream, upstream, to_upstream);
  // The spawned direction refers to this frame: it must end before this coroutine returns.
  while (!down_finished) co_await done.wait();
  Transferred t;
  t.downstream_to_upstream = up.bytes;
  t.upstream_to_downstream = down.bytes;
  t.error = up.error ? up.error : down.error;
  co_return t;
}

}  // namespace meshnode::proxy
