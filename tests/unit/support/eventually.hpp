#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace meshnode::testing_support {

/// Polls `done` every 10 ms until it holds or `limit` passes: a condition with a deadline, for
/// blocking tests that watch another thread (no fixed sleeps). Returns the last verdict.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::steady_clock::duration limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace meshnode::testing_support
