#pragma once

#include <cstddef>
#include <map>
#include <optional>

#include "base/error.hpp"
#include "base/ip.hpp"

namespace meshnode::proxy {

/// Bounds the TLS handshakes in progress on one inbound HBONE listener (a pod's 15008 on one
/// worker), in total and per source IP (issue 11 defect 9: 2,000 stalled handshakes held ≈ 49 KiB
/// each until the deadline). A connection over either bound is closed before any TLS state is
/// allocated. Worker thread only (not thread-safe; one per PodContext).
class HandshakeLimiter {
 public:
  /// Releases its slot on destruction. Move-only; must not outlive the limiter.
  class Permit {
   public:
    Permit(Permit&& other) noexcept : limiter_(other.limiter_), source_(other.source_) { other.limiter_ = nullptr; }
    Permit& operator=(Permit&&) = delete;
    Permit(const Permit&) = delete;
    ~Permit() {
      if (limiter_ != nullptr) limiter_->release(source_);
    }

   private:
    friend class HandshakeLimiter;
    Permit(HandshakeLimiter* limiter, base::IpAddr source) : limiter_(limiter), source_(source) {}
    HandshakeLimiter* limiter_;
    base::IpAddr source_;
  };

  /// @param per_listener concurrent handshakes on the listener (≥ 1).
  /// @param per_source   concurrent handshakes from one source IP (≥ 1).
  HandshakeLimiter(std::size_t per_listener, std::size_t per_source)
      : per_listener_(per_listener), per_source_(per_source) {}

  /// A slot for one handshake from `source`.
  /// @returns Errc::kLimitExceeded with "too many concurrent TLS handshakes on this listener (N)"
  ///          or "... from <ip> (N)" when a bound is reached.
  [[nodiscard]] base::Result<Permit> try_acquire(const base::IpAddr& source);
  /// Handshakes in progress (for tests).
  [[nodiscard]] std::size_t in_flight() const noexcept { return total_; }

 private:
  void release(const base::IpAddr& source) noexcept;

  std::size_t per_listener_;
  std::size_t per_source_;
  std::size_t total_ = 0;
  std::map<base::IpAddr, std::size_t> by_source_;  ///< only sources with a handshake in progress
};

}  // namespace meshnode::proxy
