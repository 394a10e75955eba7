#include "base/memory.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// jemalloc's control entry point. Weak: it resolves to jemalloc's when the executable links
// jemalloc, and stays null on glibc.
extern "C" int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));

namespace meshnode::base {
namespace {

bool on_jemalloc() { return mallctl != nullptr; }

std::size_t read_size(const char* name) {
  std::size_t value = 0;
  std::size_t len = sizeof value;
  return mallctl(name, &value, &len, nullptr, 0) == 0 ? value : 0;
}

// jemalloc's stats.* are a cached view, refreshed by writing the epoch.
void refresh_stats() {
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  mallctl("epoch", &epoch, &len, &epoch, len);
}

}  // namespace

std::string_view allocator_name() { return on_jemalloc() ? "jemalloc" : "glibc"; }

void flush_thread_cache() {
  if (on_jemalloc()) mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
}

void release_free_memory() {
  if (on_jemalloc()) {
    // MALLCTL_ARENAS_ALL (4096 in jemalloc 5) addresses every arena at once.
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
    return;
  }
  ::malloc_trim(0);
}


namespace {

// One mapping of /proc/self/smaps (proc(5)): its header line and the fields this file reads.
struct Mapping {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  bool candidate = false;  // private, readable, not writable, backed by a file
  std::size_t rss_kb = 0;
  std::size_t anonymous_kb = 0;
  bool locked = false;
};

bool droppable(const Mapping& m) { return m.candidate && !m.locked && m.anonymous_kb == 0 && m.rss_kb > 0; }

}  // namespace

Result<std::size_t> release_clean_file_pages() {
  std::FILE* smaps = std::fopen("/proc/self/smaps", "re");
  if (smaps == nullptr) return fail_errno("open /proc/self/smaps", errno);
  std::vector<Mapping> mappings;
  char* line = nullptr;  // getline(3) grows it to the longest line (a path can be long)
  std::size_t capacity = 0;
  while (::getline(&line, &capacity, smaps) != -1) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    int path_at = 0;
    // "start-end perms offset dev inode path": a header starts with the hex range.
    if (std::sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &start, &end, perms, &path_at) == 3 && path_at > 0) {
      mappings.push_back({.start = start, .end = end,
                          .candidate = perms[0] == 'r' && perms[1] != 'w' && perms[3] == 'p' && line[path_at] == '/'});
      continue;
    }
    if (mappings.empty()) continue;
    Mapping& m = mappings.back();
    std::size_t kb = 0;
    if (std::sscanf(line, "Rss: %zu kB", &kb) == 1) m.rss_kb = kb;
    else if (std::sscanf(line, "Anonymous: %zu kB", &kb) == 1) m.anonymous_kb = kb;
    else if (std::sscanf(line, "Locked: %zu kB", &kb) == 1) m.locked = m.locked || kb > 0;
    else if (std::strncmp(line, "VmFlags:", 8) == 0) m.locked = m.locked || std::strstr(line, " lo") != nullptr;
  }
  const bool read_error = std::ferror(smaps) != 0;
  std::free(line);
  std::fclose(smaps);
  if (read_error) return fail(Errc::kIo, "read /proc/self/smaps");
  std::size_t released = 0;
  for (const Mapping& m : mappings) {
    if (!droppable(m)) continue;
    // EINVAL/ENOMEM (the mapping changed since the read) only means it stays resident.
    if (::madvise(reinterpret_cast<void*>(m.start), m.end - m.start, MADV_DONTNEED) == 0) released += m.rss_kb * 1024;
  }
  return released;
}

AllocatorStats allocator_stats() {
  if (!on_jemalloc()) return {};
  refresh_stats();
  return {.allocated = read_size("stats.allocated"),
          .active = read_size("stats.active"),
          .metadata = read_size("stats.metadata"),
          .resident = read_size("stats.resident"),
          .retained = read_size("stats.retained")};
}

std::vector<AllocatorBin> allocator_bins() {
  std::vector<AllocatorBin> out;
  if (!on_jemalloc()) return out;
  refresh_stats();
  unsigned nbins = 0;
  std::size_t len = sizeof nbins;
  if (mallctl("arenas.nbins", &nbins, &len, nullptr, 0) != 0) return out;
  for (unsigned j = 0; j < nbins; ++j) {
    auto name = [j](const char* prefix, const char* field) {
      return std::string(prefix) + std::to_string(j) + "." + field;
    };
    // MALLCTL_ARENAS_ALL (4096 in jemalloc 5): the arenas merged.
    const std::size_t slabs = read_size(name("stats.arenas.4096.bins.", "curslabs").c_str());
    if (slabs == 0) continue;
    const std::size_t size = read_size(name("arenas.bin.", "size").c_str());
    const std::size_t slab_size = read_size(name("arenas.bin.", "slab_size").c_str());
    const std::size_t regs = read_size(name("stats.arenas.4096.bins.", "curregs").c_str());
    out.push_back({.size = size, .used_bytes = regs * size, .slab_bytes = slabs * slab_size, .slabs = slabs});
  }
  return out;
}

Result<void> dump_heap_profile() {
  bool prof = false;
  std::size_t len = sizeof prof;
  if (!on_jemalloc() || mallctl("opt.prof", &prof, &len, nullptr, 0) != 0 || !prof) {
    return fail(Errc::kNotFound, "heap profiling is off: run on jemalloc with MALLOC_CONF=prof:true");
  }
  if (int err = mallctl("prof.dump", nullptr, nullptr, nullptr, 0); err != 0) {
    return fail_errno("jemalloc prof.dump", err);
  }
  return {};
}

}  // namespace meshnode::base
