#pragma once

#include <string_view>

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

}  // namespace meshnode::base
