#pragma once

#include <chrono>
#include <optional>
#include <random>

namespace meshnode::kube {

/// Exponential backoff with jitter, client-go's reflector defaults (anchors §C.5): 800 ms,
/// doubling to 30 s, `jitter` 1.0 (each wait is d + rand[0,1)·d), back to the start after
/// `reset_after` without a failure.
struct BackoffPolicy {
  std::chrono::milliseconds initial{800};
  std::chrono::milliseconds max{30'000};
  double factor = 2.0;
  double jitter = 1.0;
  std::chrono::milliseconds reset_after{120'000};
};

/// The waits of one retry loop. Not thread-safe (one per loop).
class Backoff {
 public:
  explicit Backoff(BackoffPolicy policy) : policy_(policy), rng_(std::random_device{}()) {}

  /// The wait before the next attempt after a failure at `now`.
  std::chrono::milliseconds next(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    if (last_failure_ && now - *last_failure_ > policy_.reset_after) current_ = {};
    last_failure_ = now;
    current_ = current_.count() == 0
                   ? policy_.initial
                   : std::min(policy_.max, std::chrono::milliseconds(static_cast<long long>(
                                               static_cast<double>(current_.count()) * policy_.factor)));
    std::uniform_real_distribution<double> spread(0.0, policy_.jitter);
    return current_ + std::chrono::milliseconds(static_cast<long long>(static_cast<double>(current_.count()) * spread(rng_)));
  }

  /// The next failure starts again from `initial`.
  void reset() { current_ = {}; }

 private:
  BackoffPolicy policy_;
  std::mt19937 rng_;
  std::chrono::milliseconds current_{0};
  std::optional<std::chrono::steady_clock::time_point> last_failure_;
};

}  // namespace meshnode::kube
