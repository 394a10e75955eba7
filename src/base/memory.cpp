#include "base/memory.hpp"

#include <link.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

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
  std::size_t swap_kb = 0;  // copy-on-write pages that were swapped out show here, not in Anonymous
  bool seen_anonymous = false;
  bool seen_swap = false;
  bool locked = false;
};

// A field the kernel did not report counts as unsafe: dropping a page that differs from the file
// would lose it.
bool droppable(const Mapping& m) {
  return m.candidate && !m.locked && m.seen_anonymous && m.seen_swap && m.anonymous_kb == 0 && m.swap_kb == 0 &&
         m.rss_kb > 0;
}

Result<std::vector<Mapping>> read_mappings() {
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
    if (std::sscanf(line, "Rss: %zu kB", &kb) == 1) {
      m.rss_kb = kb;
    } else if (std::sscanf(line, "Anonymous: %zu kB", &kb) == 1) {
      m.anonymous_kb = kb;
      m.seen_anonymous = true;
    } else if (std::sscanf(line, "Swap: %zu kB", &kb) == 1) {
      m.swap_kb = kb;
      m.seen_swap = true;
    } else if (std::sscanf(line, "Locked: %zu kB", &kb) == 1) {
      m.locked = m.locked || kb > 0;
    } else if (std::strncmp(line, "VmFlags:", 8) == 0) {
      m.locked = m.locked || std::strstr(line, " lo") != nullptr;
    }
  }
  const bool read_error = std::ferror(smaps) != 0;
  std::free(line);
  std::fclose(smaps);
  if (read_error) return fail(Errc::kIo, "read /proc/self/smaps");
  return mappings;
}

struct Sweep {
  bool read = false;
  std::optional<Error> error;
  std::vector<Mapping> mappings;
  std::size_t released = 0;
};

// dl_iterate_phdr callback, once per loaded object. glibc holds the loader's lock for the whole
// iteration, so no dlopen or dlclose can map or unmap anything between the smaps read (on the
// first call) and the madvise: a range read there still holds the same object's pages.
int sweep_object(dl_phdr_info* info, std::size_t /*size*/, void* data) {
  Sweep& sweep = *static_cast<Sweep*>(data);
  if (!sweep.read) {
    sweep.read = true;
    auto mappings = read_mappings();
    if (!mappings) {
      sweep.error = mappings.error();
      return 1;
    }
    sweep.mappings = std::move(*mappings);
  }
  const auto page = static_cast<std::uintptr_t>(::getpagesize());
  for (int k = 0; k < info->dlpi_phnum; ++k) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[k];
    // Only segments the object never writes: RELRO and data live in writable PT_LOADs.
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) != 0) continue;
    const std::uintptr_t lo = (info->dlpi_addr + ph.p_vaddr) & ~(page - 1);
    const std::uintptr_t hi = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz + page - 1) & ~(page - 1);
    for (const Mapping& m : sweep.mappings) {
      if (!droppable(m) || m.start < lo || m.end > hi) continue;
      if (::madvise(reinterpret_cast<void*>(m.start), m.end - m.start, MADV_DONTNEED) == 0) {
        sweep.released += m.rss_kb * 1024;
      }
    }
  }
  return 0;
}

}  // namespace

Result<std::size_t> release_clean_file_pages() {
  Sweep sweep;
  ::dl_iterate_phdr(sweep_object, &sweep);
  if (sweep.error) return std::unexpected(*sweep.error);
  return sweep.released;
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
