#include "base/memory.hpp"

#include <malloc.h>

#include <cstddef>

// jemalloc's control entry point. Weak: it resolves to jemalloc's when the executable links
// jemalloc, and stays null on glibc.
extern "C" int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));

namespace meshnode::base {
namespace {

bool on_jemalloc() { return mallctl != nullptr; }

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

}  // namespace meshnode::base
