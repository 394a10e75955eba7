#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/spiffe.hpp"
#include "h2/budget.hpp"

namespace meshnode::hbone {

/// Stream-reset budgets per peer identity, shared by every inbound HBONE connection of the
/// process (all pods, all workers): a peer that spreads rapid resets over many connections is
/// stopped too (issue 11 defect 8). Each connection also has its own budget (h2::Settings); a
/// reset is charged here only after that one allowed it. Thread-safe.
class PeerResetBudgets {
 public:
  struct Limits {
    std::uint32_t burst = 1000;       ///< resets an identity may cause at once
    std::uint32_t per_second = 100;   ///< refill rate
    /// How long a new connection from an identity that exhausted its budget waits after its TLS
    /// handshake before it is served, for `cooldown` after the budget last ran out.
    std::chrono::milliseconds admission_delay{1000};
    std::chrono::milliseconds cooldown{10'000};
  };

  explicit PeerResetBudgets(Limits limits) : limits_(limits) {}
  PeerResetBudgets() : PeerResetBudgets(Limits{}) {}

  /// Charges one reset to `peer`; false when its budget is exhausted (the caller ends the
  /// connection with GOAWAY(ENHANCE_YOUR_CALM)).
  bool charge(const base::SpiffeId& peer);
  /// Limits::admission_delay within Limits::cooldown of `peer`'s budget running out, else zero.
  [[nodiscard]] std::chrono::milliseconds admission_delay(const base::SpiffeId& peer);

 private:
  Limits limits_;
  std::mutex mutex_;
  struct Peer {
    h2::TokenBucket bucket;
    h2::TokenBucket::Clock::time_point calm_until{};
  };
  std::unordered_map<std::string, Peer> peers_;  // by SPIFFE ID
};

}  // namespace meshnode::hbone
