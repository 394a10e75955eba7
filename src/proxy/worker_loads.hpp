#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "telemetry/metrics.hpp"

namespace meshnode::proxy {

/// Open connections per data worker (every pod's together), so that the worker that accepted a
/// connection can hand it to a less busy one. SO_REUSEPORT spreads a pod's connections over its
/// per-worker listeners by a hash of their addresses, blind to load: 3 of 4 busy connections on
/// one worker was a common draw (issue 15, "4 client pods"), and that worker then carried 3 of
/// them on one core while the other idled. The least-connections choice is haproxy's across its
/// threads. Counts are relaxed atomics: a choice made concurrently on two workers may see a count
/// one short, which only makes the balance approximate.
class WorkerLoads {
 public:
  /// `workers` ≥ 1 slots, all 0. With `registry`, each slot is also exported as
  /// `meshnode_worker_open_connections{worker="<index>"}` and every hand-off counted in
  /// `meshnode_worker_handoffs_total`, so an operator sees how the workers share the load.
  explicit WorkerLoads(std::size_t workers, telemetry::MetricsRegistry* registry = nullptr);

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The worker a connection accepted on worker `here` should run on: the one with the fewest
  /// open connections, `here` itself when no other has fewer (a hand-off costs a post to another
  /// thread), the lowest index among the others that tie. `here` < size().
  [[nodiscard]] std::size_t pick(std::size_t here) const noexcept;
  /// One more connection on `worker`: counted as soon as it is chosen, before it runs there, so
  /// the next choice on any thread sees it.
  void add(std::size_t worker) noexcept {
    slots_[worker].open.fetch_add(1, std::memory_order_relaxed);
    if (slots_[worker].gauge != nullptr) slots_[worker].gauge->add(1);
  }
  /// One connection fewer on `worker` (it ended, or never got there).
  void remove(std::size_t worker) noexcept {
    slots_[worker].open.fetch_sub(1, std::memory_order_relaxed);
    if (slots_[worker].gauge != nullptr) slots_[worker].gauge->sub(1);
  }
  /// A connection accepted on one worker went to another.
  void count_handoff() noexcept {
    if (handoffs_ != nullptr) handoffs_->inc();
  }
  /// Open connections counted on `worker`.
  [[nodiscard]] std::size_t open(std::size_t worker) const noexcept {
    return slots_[worker].open.load(std::memory_order_relaxed);
  }

 private:
  // A cache line each: every accept and every connection's end writes its worker's slot.
  struct alignas(64) Slot {
    std::atomic<std::size_t> open{0};
    telemetry::Gauge* gauge = nullptr;  ///< the exported copy (null without a registry)
  };
  std::unique_ptr<Slot[]> slots_;
  std::size_t size_;
  telemetry::Counter* handoffs_ = nullptr;
};

}  // namespace meshnode::proxy
