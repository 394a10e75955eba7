#pragma once

#include <cstdio>
#include <cstdlib>

/// Aborts with a message when an invariant that cannot fail after startup fails (e.g. restoring a
/// thread's network namespace). Never use it on peer, kernel or file input: those return errors.
#define MESHNODE_CHECK(cond, msg)                                                          \
  do {                                                                                     \
    if (!(cond)) [[unlikely]] {                                                            \
      std::fprintf(stderr, "meshnode: fatal: %s (%s) at %s:%d\n", (msg), #cond, __FILE__, \
                   __LINE__);                                                              \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
