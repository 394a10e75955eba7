#include "proxy/handshake_limiter.hpp"

#include <string>

namespace meshnode::proxy {

base::Result<HandshakeLimiter::Permit> HandshakeLimiter::try_acquire(const base::IpAddr& source) {
  if (total_ >= per_listener_) {
    return base::fail(base::Errc::kLimitExceeded,
                      "too many concurrent TLS handshakes on this listener (" + std::to_string(per_listener_) + ")");
  }
  auto& from_source = by_source_[source];
  if (from_source >= per_source_) {
    return base::fail(base::Errc::kLimitExceeded, "too many concurrent TLS handshakes from " + source.to_string() +
                                                      " (" + std::to_string(per_source_) + ")");
  }
  ++from_source;
  ++total_;
  return Permit(this, source);
}

void HandshakeLimiter::release(const base::IpAddr& source) noexcept {
  --total_;
  auto it = by_source_.find(source);
  if (it != by_source_.end() && --it->second == 0) by_source_.erase(it);
}

}  // namespace meshnode::proxy
