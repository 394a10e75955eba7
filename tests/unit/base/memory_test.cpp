// base::memory on the allocator the executables run on: this test binary links it the way
// meshnode-proxy does (meshnode_use_allocator), so a release build tests jemalloc with our options.
#include "base/memory.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace meshnode::base {
namespace {

/// RssAnon of this process in KiB (/proc/self/status).
long rss_anon_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = -1;
  while (in >> key) {
    if (key == "RssAnon:") {
      in >> value;
      break;
    }
    in.ignore(1 << 10, '\n');
  }
  return value;
}

TEST(Memory, RunsOnTheAllocatorTheBuildChose) {
#if defined(MESHNODE_EXPECT_JEMALLOC)
  EXPECT_EQ(allocator_name(), "jemalloc");
#else
  EXPECT_EQ(allocator_name(), "glibc");
#endif
}

/// Rss in KiB of the mapping that holds `address` (/proc/self/smaps); -1 if there is none.
long mapping_rss_kib(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool in_it = false;
  while (std::getline(in, line)) {
    unsigned long from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find(' ') > line.find('-')) {
      in_it = from <= at && at < to;
      continue;
    }
    if (long kb = 0; in_it && std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

/// A 1 MiB temporary file whose byte i is i % 251, mapped private with `prot`; unlinked at once.
/// `data` is null if the file could not be made or mapped.
struct MappedFile {
  static constexpr std::size_t kSize = 1 << 20;
  char* data = nullptr;
  explicit MappedFile(int prot) {
    char path[] = "/tmp/meshnode-memory-test-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) return;
    ::unlink(path);
    std::string bytes(kSize, '\0');
    for (std::size_t i = 0; i < kSize; ++i) bytes[i] = static_cast<char>(i % 251);
    void* p = ::write(fd, bytes.data(), kSize) == static_cast<ssize_t>(kSize)
                  ? ::mmap(nullptr, kSize, prot, MAP_PRIVATE, fd, 0)
                  : MAP_FAILED;
    ::close(fd);
    if (p != MAP_FAILED) data = static_cast<char*>(p);
  }
  ~MappedFile() {
    if (data != nullptr) ::munmap(data, kSize);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  /// Reads every page; returns how many bytes differ from the file's pattern.
  std::size_t mismatches() const {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < kSize; ++i) bad += data[i] != static_cast<char>(i % 251);
    return bad;
  }
};

// Start-up code leaves the process's RSS, and the code runs on (its pages fault back in).
TEST(Memory, CodePagesOfTheExecutableLeaveRssAndStillRun) {
  const void* code = reinterpret_cast<const void*>(&mapping_rss_kib);
  const long before = mapping_rss_kib(code);
  ASSERT_GT(before, 0);
  auto released = release_clean_file_pages();
  ASSERT_TRUE(released) << released.error().message();
  EXPECT_GE(*released, static_cast<std::size_t>(before) * 1024);
  const long after = mapping_rss_kib(code);  // runs code of this mapping: some of it is back
  EXPECT_GT(after, 0);
  EXPECT_LT(after, before) << "the executable's code mapping kept its pages";
}

// Only the loaded objects' read-only segments are released. A private file mapping of anything
// else (here: a data file, clean and copy-on-write; also RELRO's shape: written, then read-only)
// keeps its pages and its contents: its file may differ from what the process read or wrote.
TEST(Memory, FileMappingsNoLoadedObjectOwnsKeepTheirPages) {
  MappedFile clean(PROT_READ);
  MappedFile written(PROT_READ | PROT_WRITE);
  ASSERT_NE(clean.data, nullptr);
  ASSERT_NE(written.data, nullptr);
  ASSERT_EQ(clean.mismatches(), 0u);
  ASSERT_EQ(written.mismatches(), 0u);  // every page read in; every other one then copied on write
  for (std::size_t i = 0; i < MappedFile::kSize; i += 2 * 4096) written.data[i] = static_cast<char>(0xA5);
  ASSERT_EQ(::mprotect(written.data, MappedFile::kSize, PROT_READ), 0);
  ASSERT_TRUE(release_clean_file_pages());
  EXPECT_EQ(mapping_rss_kib(clean.data), 1024);
  EXPECT_EQ(mapping_rss_kib(written.data), 1024);
  for (std::size_t i = 0; i < MappedFile::kSize; i += 2 * 4096) {
    ASSERT_EQ(written.data[i], static_cast<char>(0xA5)) << "page " << i / 4096 << " lost its written byte";
  }
  EXPECT_EQ(clean.mismatches(), 0u);
}

// What the proxy does after a burst: blocks freed by another thread (a worker) stay cached until
// that thread flushes and the arenas are purged; then the pages are back with the kernel.
TEST(Memory, FreedSmallBlocksOfAnotherThreadAreReturned) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "ASan's allocator quarantines freed memory by design";
#endif
  const long before = rss_anon_kib();
  ASSERT_GT(before, 0);
  std::thread worker([] {
    // 64 MiB in 4 KiB blocks (a TLS record buffer's size class), touched, then freed out of
    // order so no arena can simply shrink from its top.
    std::vector<std::unique_ptr<char[]>> blocks(16 * 1024);
    for (auto& b : blocks) {
      b = std::make_unique<char[]>(4096);
      b[0] = b[4095] = 1;
    }
    for (std::size_t i = 0; i < blocks.size(); i += 2) blocks[i].reset();
    for (std::size_t i = 1; i < blocks.size(); i += 2) blocks[i].reset();
    flush_thread_cache();
  });
  worker.join();
  // One purge sometimes leaves the pages resident: 7 of 30 runs beside a loaded CI run, where a
  // second purge 50 ms later always returned them (jemalloc's background thread, which decays the
  // same arenas, is the likely party). The proxy purges every 30 s, so what its user sees is the
  // pages back within a few purges, which is what this checks.
  long after = 0;
  int purges = 0;
  for (; purges < 20; ++purges) {
    if (purges > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release_free_memory();
    after = rss_anon_kib();
    if (after - before < 4 * 1024) break;
  }
  // 64 MiB were touched; at most 4 MiB may stay (allocator metadata, this thread's cache).
  EXPECT_LT(after - before, 4 * 1024) << "RssAnon " << before << " KiB -> " << after << " KiB after freeing 64 MiB and "
                                      << purges << " purges";
}

// The fragmentation a peak leaves: one object kept in every slab of its class keeps the slab.
TEST(Memory, BinsShowSlabsThatFewLiveObjectsPin) {
#if !defined(MESHNODE_EXPECT_JEMALLOC)
  EXPECT_TRUE(allocator_bins().empty());  // glibc keeps no size-class totals
  GTEST_SKIP() << "size classes are jemalloc's";
#else
  auto of_class = [](std::size_t size) {
    for (const auto& b : allocator_bins()) {
      if (b.size == size) return b;
    }
    return AllocatorBin{.size = size};
  };
  // Blocks that earlier tests freed into this thread's cache still count as live until flushed.
  flush_thread_cache();
  const AllocatorBin before = of_class(192);
  std::vector<std::unique_ptr<char[]>> blocks(20000);
  for (auto& b : blocks) b = std::make_unique<char[]>(192);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i % 64 != 0) blocks[i].reset();  // keeps 1 in 64: a few per slab
  }
  flush_thread_cache();
  const AllocatorBin after = of_class(192);
  ASSERT_GT(after.slabs, before.slabs);
  // About 313 objects live (60 KB) while their slabs hold several times that.
  EXPECT_GE(after.used_bytes - before.used_bytes, 300u * 192);
  EXPECT_GT(after.slab_bytes - before.slab_bytes, 4 * (after.used_bytes - before.used_bytes));
#endif
}

}  // namespace
}  // namespace meshnode::base
