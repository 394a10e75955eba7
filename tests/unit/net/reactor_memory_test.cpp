// Asio's per-socket reactor records (src/net/asio_impl.cpp) on the allocator the executables run
// on: this binary links it the way meshnode-proxy does (meshnode_use_allocator), so a release
// build checks the records' own jemalloc arena; on glibc (sanitizer builds) there is none.
#include "base/memory.hpp"

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace meshnode::net {
namespace {

#if defined(MESHNODE_EXPECT_JEMALLOC)
using base::AllocatorBin;

AllocatorBin bin_of(std::size_t size) {
  for (const auto& b : base::allocator_bins()) {
    if (b.size == size) return b;
  }
  return AllocatorBin{.size = size};
}
#endif

// A load peak opens sockets while the connections allocate short-lived objects of the records'
// size class (192 B). Asio keeps every record after its socket closes; if the records shared
// slabs with those objects, each record would keep a slab resident after the peak.
TEST(ReactorMemory, SocketRecordsPinNoSlabsOfShortLivedObjectsAfterAPeak) {
#if !defined(MESHNODE_EXPECT_JEMALLOC)
  GTEST_SKIP() << "the records' own arena is jemalloc's; glibc has no size classes to check";
#else
  constexpr int kSockets = 640;       // within the usual 1024 open-files soft limit
  constexpr int kShortLivedPer = 3;   // per socket, of the records' class
  asio::io_context io;
  base::flush_thread_cache();
  const AllocatorBin before = bin_of(192);

  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
  std::vector<std::unique_ptr<char[]>> short_lived;
  for (int i = 0; i < kSockets; ++i) {
    auto s = std::make_unique<asio::ip::tcp::socket>(io);
    s->open(asio::ip::tcp::v4());  // registers the descriptor: one record
    sockets.push_back(std::move(s));
    for (int j = 0; j < kShortLivedPer; ++j) short_lived.push_back(std::make_unique<char[]>(180));
  }
  short_lived.clear();
  sockets.clear();  // the records go to Asio's free list: still allocated
  base::flush_thread_cache();
  const AllocatorBin after = bin_of(192);

  const std::size_t live = after.used_bytes - before.used_bytes;
  const std::size_t slabs = after.slab_bytes - before.slab_bytes;
  ASSERT_GE(live, kSockets * 168u) << "the records are kept for reuse";
  // Dense: the records' slabs plus at most one partly filled slab per arena (12 KiB for 192 B).
  // Shared slabs would hold about 4x the live bytes here.
  EXPECT_LE(slabs, live + live / 8 + 2 * 12 * 1024)
      << "192 B class: +" << live << " B live in +" << slabs << " B of slabs (" << after.slabs - before.slabs
      << " slabs)";
#endif
}

}  // namespace
}  // namespace meshnode::net
