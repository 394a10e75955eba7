#include "proxy/handshake_limiter.hpp"

#include <string>
#include <utility>

namespace meshnode::proxy {

base::Result<HandshakeLimiter::Permit> HandshakeLimiter::try_acquire(const base::IpAddr& source,
                                                                     std::function<void()> abort,
                                                                     Clock::time_point now) {
  if (auto it = by_source_.find(source); it != by_source_.end() && it->second >= per_source_) {
    return base::fail(base::Errc::kLimitExceeded, "too many concurrent TLS handshakes from " + source.to_string() +
                                                      " (" + std::to_string(per_source_) + ")");
  }
  if (total_ >= per_listener_) {
    auto oldest = entries_.begin();
    while (oldest != entries_.end() && oldest->second.evicted) ++oldest;
    if (oldest == entries_.end() || now - oldest->second.started < evict_after_) {
      return base::fail(base::Errc::kLimitExceeded,
                        "too many concurrent TLS handshakes on this listener (" + std::to_string(per_listener_) + ")");
    }
    Entry& victim = oldest->second;
    victim.evicted = true;
    uncount(victim.source);
    ++evictions_;
    auto evict = std::exchange(victim.abort, nullptr);
    if (evict) evict();
  }
  ++by_source_[source];
  ++total_;
  const std::uint64_t id = next_id_++;
  entries_.emplace(id, Entry{source, now, std::move(abort)});
  return Permit(this, id);
}

bool HandshakeLimiter::evicted(std::uint64_t id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.evicted;
}

void HandshakeLimiter::uncount(const base::IpAddr& source) noexcept {
  --total_;
  auto it = by_source_.find(source);
  if (it != by_source_.end() && --it->second == 0) by_source_.erase(it);
}

void HandshakeLimiter::release(std::uint64_t id) noexcept {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (!it->second.evicted) uncount(it->second.source);
  entries_.erase(it);
}

}  // namespace meshnode::proxy
