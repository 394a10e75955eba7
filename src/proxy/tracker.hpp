#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "state/snapshot.hpp"

namespace meshnode::proxy {

/// Live connections of one pod on one worker, so a drain or a DelWorkload can abort them and a
/// policy change can re-check them. `track`, `abort_all` and `recheck_all` run on the worker
/// thread; `size` may be read from any thread.
class ConnectionTracker {
 public:
  using Abort = std::function<void()>;
  /// Re-authorizes a live connection against a new snapshot: nullopt = still allowed, else the
  /// reason it is now denied (the connection then closes itself with that reason).
  using Recheck = std::function<std::optional<std::string>(const state::StateSnapshot&)>;

  /// Unregisters on destruction (end of the connection's coroutine).
  class Guard {
   public:
    Guard(ConnectionTracker* tracker, std::uint64_t id) : tracker_(tracker), id_(id) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() {
      tracker_->aborts_.erase(id_);
      tracker_->rechecks_.erase(id_);
      tracker_->count_.fetch_sub(1, std::memory_order_relaxed);
    }
    /// Makes the connection subject to policy re-evaluation from now on.
    void set_recheck(Recheck recheck) { tracker_->rechecks_[id_] = std::move(recheck); }

   private:
    ConnectionTracker* tracker_;
    std::uint64_t id_;
  };

  /// Registers a connection; `abort` must reset its sockets/streams (it may run at most once).
  [[nodiscard]] Guard track(Abort abort) {
    auto id = next_id_++;
    aborts_.emplace(id, std::move(abort));
    count_.fetch_add(1, std::memory_order_relaxed);
    return Guard(this, id);
  }

  /// Aborts every registered connection; their coroutines then end and unregister themselves.
  void abort_all() {
    auto pending = aborts_;  // aborting may end coroutines that erase from aborts_
    for (auto& [id, abort] : pending) abort();
  }

  /// Runs every registered re-check against `snapshot` and aborts the connections now denied.
  /// @returns how many were closed.
  std::size_t recheck_all(const state::StateSnapshot& snapshot) {
    std::vector<std::uint64_t> denied;
    for (auto& [id, recheck] : rechecks_) {
      if (recheck(snapshot)) denied.push_back(id);
    }
    for (auto id : denied) {
      if (auto it = aborts_.find(id); it != aborts_.end()) it->second();
    }
    return denied.size();
  }

  [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }

 private:
  std::map<std::uint64_t, Abort> aborts_;
  std::map<std::uint64_t, Recheck> rechecks_;
  std::uint64_t next_id_ = 1;
  std::atomic<std::size_t> count_{0};
};

}  // namespace meshnode::proxy
