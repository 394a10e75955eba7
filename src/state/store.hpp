#pragma once

#include <atomic>
#include <memory>

#include "state/snapshot.hpp"

namespace meshnode::state {

/// The current state snapshot, swapped atomically by the control thread and read lock-free-ish
/// by workers once per connection decision (DESIGN §3). Thread-safe.
class StateStore {
 public:
  explicit StateStore(std::shared_ptr<const StateSnapshot> initial) : current_(std::move(initial)) {}
  [[nodiscard]] std::shared_ptr<const StateSnapshot> load() const { return current_.load(); }
  void store(std::shared_ptr<const StateSnapshot> next) { current_.store(std::move(next)); }

 private:
  std::atomic<std::shared_ptr<const StateSnapshot>> current_;
};

}  // namespace meshnode::state
