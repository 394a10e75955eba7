#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "base/error.hpp"
#include "base/ip.hpp"

namespace meshnode::proxy {

/// Bounds the TLS handshakes in progress on one inbound HBONE listener (a pod's 15008 on one
/// worker), in total and per source IP (issue 11 defect 9: 2,000 stalled handshakes held ≈ 49 KiB
/// each until the deadline). A connection over the per-source bound is closed before any TLS
/// state is allocated. When the listener is full, the oldest handshake in progress gives way to
/// the newcomer if it has been in progress for `evict_after` or more (a real handshake takes
/// milliseconds): otherwise a few source IPs that stall handshakes could keep every slot taken
/// until the handshake deadline and lock legitimate peers out. Worker thread only (not
/// thread-safe; one per PodContext).
class HandshakeLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  /// Releases its slot on destruction. Move-only; must not outlive the limiter.
  class Permit {
   public:
    Permit(Permit&& other) noexcept : limiter_(other.limiter_), id_(other.id_) { other.limiter_ = nullptr; }
    Permit& operator=(Permit&&) = delete;
    Permit(const Permit&) = delete;
    ~Permit() {
      if (limiter_ != nullptr) limiter_->release(id_);
    }
    /// Whether this handshake was evicted (its abort function has been called).
    [[nodiscard]] bool evicted() const { return limiter_ != nullptr && limiter_->evicted(id_); }

   private:
    friend class HandshakeLimiter;
    Permit(HandshakeLimiter* limiter, std::uint64_t id) : limiter_(limiter), id_(id) {}
    HandshakeLimiter* limiter_;
    std::uint64_t id_;
  };

  /// @param per_listener concurrent handshakes on the listener (≥ 1).
  /// @param per_source   concurrent handshakes from one source IP (≥ 1).
  /// @param evict_after  age from which the oldest handshake gives way when the listener is full.
  HandshakeLimiter(std::size_t per_listener, std::size_t per_source, Clock::duration evict_after)
      : per_listener_(per_listener), per_source_(per_source), evict_after_(evict_after) {}

  /// A slot for one handshake from `source`, started at `now`. `abort` is called at most once, if
  /// the handshake is evicted: it must make the handshake fail promptly (Inbound shuts the socket
  /// down). The evicted handshake's slot is free at once.
  /// @returns Errc::kLimitExceeded with "too many concurrent TLS handshakes from <ip> (N)", or
  ///          "... on this listener (N)" when it is full and no handshake is old enough to evict.
  [[nodiscard]] base::Result<Permit> try_acquire(const base::IpAddr& source, std::function<void()> abort,
                                                 Clock::time_point now = Clock::now());
  /// Handshakes in progress (evicted ones excluded; for tests).
  [[nodiscard]] std::size_t in_flight() const noexcept { return total_; }
  /// Handshakes evicted so far (for tests).
  [[nodiscard]] std::uint64_t evictions() const noexcept { return evictions_; }

 private:
  struct Entry {
    base::IpAddr source;
    Clock::time_point started;
    std::function<void()> abort;
    bool evicted = false;  // no longer counted; kept until its Permit goes
  };

  void release(std::uint64_t id) noexcept;
  [[nodiscard]] bool evicted(std::uint64_t id) const;
  void uncount(const base::IpAddr& source) noexcept;

  std::size_t per_listener_;
  std::size_t per_source_;
  Clock::duration evict_after_;
  std::size_t total_ = 0;
  std::uint64_t next_id_ = 0;
  std::uint64_t evictions_ = 0;
  std::map<std::uint64_t, Entry> entries_;         ///< by id: oldest first
  std::map<base::IpAddr, std::size_t> by_source_;  ///< only sources with a handshake counted
};

}  // namespace meshnode::proxy
