#include "hbone/reset_budget.hpp"

namespace meshnode::hbone {
namespace {
// Identities kept before those with a full bucket and no cooldown are forgotten (such an entry
// is the same as none).
constexpr std::size_t kForgetAbove = 4096;
}  // namespace

bool PeerResetBudgets::charge(const base::SpiffeId& peer) {
  const auto now = h2::TokenBucket::Clock::now();
  std::lock_guard lock(mutex_);
  if (peers_.size() > kForgetAbove) {
    for (auto it = peers_.begin(); it != peers_.end();) {
      const bool idle = it->second.bucket.full(now) && it->second.calm_until <= now;
      it = idle ? peers_.erase(it) : std::next(it);
    }
  }
  auto [it, added] = peers_.try_emplace(peer.to_string(), Peer{h2::TokenBucket(limits_.burst, limits_.per_second, now)});
  if (it->second.bucket.take(now)) return true;
  it->second.calm_until = now + limits_.cooldown;
  return false;
}

std::chrono::milliseconds PeerResetBudgets::admission_delay(const base::SpiffeId& peer) {
  const auto now = h2::TokenBucket::Clock::now();
  std::lock_guard lock(mutex_);
  auto it = peers_.find(peer.to_string());
  if (it == peers_.end() || it->second.calm_until <= now) return std::chrono::milliseconds{0};
  return limits_.admission_delay;
}

}  // namespace meshnode::hbone
