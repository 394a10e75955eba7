#pragma once

// Invariant checks for the fuzz targets: a broken invariant is a finding, so it prints which one and
// aborts; libFuzzer then saves the input as crash-<sha1> like any sanitizer report.
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                                       \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
      std::abort();                                                                                  \
    }                                                                                                \
  } while (0)
