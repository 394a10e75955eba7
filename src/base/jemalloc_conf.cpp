// jemalloc's build-time options for our executables (compiled into each one that links jemalloc,
// see meshnode_use_allocator in cmake/meshnode.cmake; the MALLOC_CONF environment variable still
// overrides them). Why these:
// - background_thread: a jemalloc thread returns dirty pages on the decay schedule, so a proxy
//   that goes idle after a burst gives its memory back without any allocation to trigger it.
// - dirty_decay_ms 1000 / muzzy_decay_ms 0: freed pages stay reusable for ~1 s (a burst that
//   continues reuses them without page faults), then are returned with MADV_DONTNEED at once
//   (no "muzzy" MADV_FREE stage, whose pages still count in RSS until the kernel needs them).
// - narenas 2: one per core of a small node is enough for our few threads (workers, control, CA);
//   fewer arenas fragment less, and the per-thread caches take the contention.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's interface (jemalloc(3) "malloc_conf").
const char* malloc_conf = "background_thread:true,narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0";
}
