// Asio's non-template code, compiled once for the whole build (ASIO_SEPARATE_COMPILATION, set on
// meshnode::asio in cmake/deps.cmake), and the one place where we choose how Asio's reactor
// allocates its per-socket records.
//
// Why the records get a heap of their own: epoll_reactor keeps one descriptor_state (168 B) per
// socket it has ever had open at once and never frees them (epoll can still hand out a pointer
// to a closed socket's record, so Asio keeps them type-stable on a free list for reuse). Allocated
// from the general heap during a load peak, they land between the short-lived objects of the same
// size class, and once the peak is over every 12 KiB slab that still holds one record stays
// resident: after the 10,000-connection soak (bench/soak.sh) 1.45 MB of records pinned 4 MB of
// 192 B slabs (issue 11). In a jemalloc arena of their own they sit densely, and the general
// heap's slabs empty out and go back to the system after the peak.
#include <asio/detail/config.hpp>

#if !defined(ASIO_SEPARATE_COMPILATION)
#error "asio_impl.cpp is Asio's separately compiled source: build it with ASIO_SEPARATE_COMPILATION"
#endif

#include <asio/detail/epoll_reactor.hpp>
#include <asio/detail/object_pool.hpp>

#include <cstddef>
#include <new>

namespace asio::detail {
// Declared before Asio's sources below instantiate them (allocate_descriptor_state in
// epoll_reactor.ipp): an explicit specialization must precede the first use.
template <>
epoll_reactor::descriptor_state* object_pool_access::create<epoll_reactor::descriptor_state, bool>(bool locking);
template <>
void object_pool_access::destroy<epoll_reactor::descriptor_state>(epoll_reactor::descriptor_state* state);
}  // namespace asio::detail

#include <asio/impl/src.hpp>

// jemalloc's non-standard API (jemalloc(3)). Weak: resolved when the executable links jemalloc
// (meshnode_use_allocator in cmake/meshnode.cmake), null on glibc, where the records come from
// operator new as Asio would allocate them.
extern "C" {
int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));
void* mallocx(std::size_t size, int flags) __attribute__((weak));
void dallocx(void* ptr, int flags) __attribute__((weak));
}

namespace {

// jemalloc(3) flag encodings (jemalloc 5): MALLOCX_ARENA(a) and MALLOCX_TCACHE_NONE. Bypassing the
// thread cache keeps a freed record from being handed to an unrelated allocation of its class.
constexpr int mallocx_arena(unsigned arena) { return static_cast<int>((arena + 1) << 20); }
constexpr int kMallocxTcacheNone = 1 << 8;

/// The jemalloc flags that address the reactor records' own arena, created on first use;
/// -1 on glibc or when jemalloc refuses to create an arena (then operator new is used).
int record_heap_flags() {
  static const int flags = [] {
    if (mallctl == nullptr || mallocx == nullptr || dallocx == nullptr) return -1;
    unsigned arena = 0;
    std::size_t len = sizeof(arena);
    if (mallctl("arenas.create", &arena, &len, nullptr, 0) != 0) return -1;
    return mallocx_arena(arena) | kMallocxTcacheNone;
  }();
  return flags;
}

}  // namespace

namespace asio::detail {

template <>
epoll_reactor::descriptor_state* object_pool_access::create<epoll_reactor::descriptor_state, bool>(bool locking) {
  using State = epoll_reactor::descriptor_state;
  const int flags = record_heap_flags();
  if (flags < 0) return new State(locking);
  void* memory = mallocx(sizeof(State), flags);
  if (memory == nullptr) throw std::bad_alloc();
  try {
    return new (memory) State(locking);
  } catch (...) {
    dallocx(memory, kMallocxTcacheNone);
    throw;
  }
}

template <>
void object_pool_access::destroy<epoll_reactor::descriptor_state>(epoll_reactor::descriptor_state* state) {
  using State = epoll_reactor::descriptor_state;
  if (record_heap_flags() < 0) {
    delete state;
    return;
  }
  state->~State();
  // dallocx finds the arena from the pointer.
  dallocx(state, kMallocxTcacheNone);
}

}  // namespace asio::detail
