#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace meshnode::telemetry {
class Counter;
}

namespace meshnode::h2 {

/// Counters of a peer's misbehaviour (null: not counted). Counters outlive every session.
struct ViolationCounters {
  telemetry::Counter* header_list_too_large = nullptr;  ///< header blocks over MAX_HEADER_LIST_SIZE
  telemetry::Counter* stream_reset = nullptr;           ///< resets charged to the peer's budget
  telemetry::Counter* reset_budget_exceeded = nullptr;  ///< connections ended with ENHANCE_YOUR_CALM
};

/// A token bucket: `burst` tokens at most, refilled at `per_second`; each take() spends one.
/// Budgets abusive events (stream resets, oversized header lists) without punishing a peer that
/// causes a few of them now and then. Pure; not thread-safe.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  TokenBucket(std::uint32_t burst, std::uint32_t per_second, Clock::time_point now = Clock::now()) noexcept
      : burst_(burst), per_second_(per_second), tokens_(burst), last_(now) {}

  /// Spends one token; false when the bucket is empty (the budget is exhausted right now).
  bool take(Clock::time_point now = Clock::now()) noexcept {
    refill(now);
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

  /// True when the bucket is back to `burst` tokens (as if never used).
  [[nodiscard]] bool full(Clock::time_point now = Clock::now()) noexcept {
    refill(now);
    return tokens_ >= burst_;
  }

  /// True while no token is left (without spending one).
  [[nodiscard]] bool empty(Clock::time_point now = Clock::now()) noexcept {
    refill(now);
    return tokens_ < 1.0;
  }

 private:
  void refill(Clock::time_point now) noexcept {
    if (now <= last_) return;
    const double seconds = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min<double>(burst_, tokens_ + seconds * per_second_);
    last_ = now;
  }

  std::uint32_t burst_;
  std::uint32_t per_second_;
  double tokens_;
  Clock::time_point last_;
};

/// Size of a header field as SETTINGS_MAX_HEADER_LIST_SIZE counts it: the uncompressed name and
/// value plus 32 bytes of overhead (RFC 9113 §6.5.2). Bytes.
[[nodiscard]] constexpr std::size_t header_field_size(std::size_t name_len, std::size_t value_len) noexcept {
  return name_len + value_len + 32;
}

}  // namespace meshnode::h2
