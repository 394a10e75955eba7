#pragma once

namespace meshnode::base {

/// Starts loading the cache line at `p` (a hint: no effect on program state, never faults).
/// For loops over many fresh entries that would otherwise wait on one cache miss at a time.
/// Inline asm on x86-64 because GCC 12.2 silently dropped the __builtin_prefetch of the xDS
/// store's claim slot (objdump: the instruction missing; -fdump-tree-optimized: the call gone).
/// A 15-line reduction loses it too at -O1/-O2: an inlined member that checks `!vec.empty()`
/// and prefetches `&vec[h & mask]`, called in a loop that stores into `vec`; close variants
/// (no emptiness check, a free function) keep it. Nothing removes the asm form.
inline void prefetch(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetcht0 (%0)" : : "r"(p));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace meshnode::base
