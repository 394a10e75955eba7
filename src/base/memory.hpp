#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace meshnode::base {

/// Which malloc the process runs on: "jemalloc" when the executable links it (meshnode-proxy does
/// in release builds, MESHNODE_JEMALLOC), else "glibc". Decided at load time
/// from whether jemalloc's `mallctl` is present, so libraries need no build flag for it.
[[nodiscard]] std::string_view allocator_name();

/// Gives this thread's cached free blocks back to the shared arenas (jemalloc `thread.tcache.flush`;
/// no-op on glibc, whose per-thread cache is small). Call on each worker thread before
/// `release_free_memory`, or the blocks those caches hold keep their pages resident.
void flush_thread_cache();

/// Returns free pages to the kernel: jemalloc purges every arena (`arena.<all>.purge`), glibc
/// runs `malloc_trim(0)`. One walk of the allocator's free lists: well under a millisecond at our
/// heap sizes.
void release_free_memory();

/// Unmaps the clean pages of the loaded objects' read-only segments (the executable's and the
/// shared libraries' code, read-only data and relocation tables): madvise(MADV_DONTNEED) on every
/// private file mapping that lies wholly inside a non-writable PT_LOAD segment of an object that
/// dl_iterate_phdr lists, and that holds no copy-on-write page (Anonymous and Swap both 0 in
/// /proc/self/smaps) and is not locked. RELRO and data live in writable segments and are never
/// touched; a mapping with a copy-on-write page (a debugger's breakpoint) or a field the kernel did
/// not report is left alone; so is any file mapping no loaded object owns. It runs under the
/// loader's lock (dl_iterate_phdr), so a concurrent dlopen/dlclose cannot change a range between
/// the read and the madvise. The pages stay in the page cache; those the process touches again come
/// back as minor faults (with the kernel's fault-around, 64 KiB each).
/// Why: start-up code (static initializers, config parsing, certificate issuance) and the
/// fault-around neighbours of every page touched once otherwise stay mapped, and counted in RSS,
/// for the life of the process; unmapped, they are also the first the kernel can reclaim.
/// Returns the resident bytes those mappings held before the call; Errc::kIo if
/// /proc/self/smaps cannot be read. Costs one smaps walk: about a millisecond here.
[[nodiscard]] Result<std::size_t> release_clean_file_pages();

/// The allocator's own view of the heap, in bytes (jemalloc `stats.*` after an `epoch` refresh;
/// every field 0 on glibc, which keeps no such totals). allocated <= active <= resident.
struct AllocatorStats {
  std::size_t allocated = 0;  ///< bytes the program holds (live allocations)
  std::size_t active = 0;     ///< bytes in pages that hold at least one live allocation
  std::size_t metadata = 0;   ///< the allocator's own bookkeeping (never returned)
  std::size_t resident = 0;   ///< bytes in pages the allocator has touched and not returned
  std::size_t retained = 0;   ///< virtual memory kept mapped but returned to the kernel (not RSS)
};
[[nodiscard]] AllocatorStats allocator_stats();

/// One small size class of jemalloc, all arenas merged (`arenas.bin.<j>.*` and
/// `stats.arenas.<all>.bins.<j>.*`). What a peak leaves behind shows here: slabs that a few
/// long-lived objects keep from being returned (slab_bytes much larger than used_bytes).
struct AllocatorBin {
  std::size_t size = 0;        ///< bytes per object of this class
  std::size_t used_bytes = 0;  ///< live objects × size
  std::size_t slab_bytes = 0;  ///< slabs held × slab size (pages active for this class)
  std::size_t slabs = 0;       ///< slabs held
};
/// The classes with at least one slab, smallest first; empty on glibc.
[[nodiscard]] std::vector<AllocatorBin> allocator_bins();

/// Writes a jemalloc heap profile (live allocations by call stack, for `jeprof`) to the file that
/// the `prof_prefix` option names (default `jeprof.<pid>.<n>.m<n>.heap` in the working
/// directory); the path is never taken from a caller. Errc::kNotFound unless the process runs
/// on jemalloc with profiling on (`MALLOC_CONF=prof:true`, read at start); Errc::kIo if the
/// write failed.
[[nodiscard]] Result<void> dump_heap_profile();

}  // namespace meshnode::base
