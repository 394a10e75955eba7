#pragma once

#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace meshnode::telemetry {

/// The proxy's readiness: ready when no startup task is pending (feature map §4.8; tasks such as
/// "state manager", "proxy", "workload proxy manager"). Thread-safe; any thread may call.
class Readiness {
 public:
  /// Marks `task` pending. Adding a task that is already pending is a no-op (set semantics).
  void add_pending(std::string task);
  /// Marks `task` done; unknown tasks are ignored.
  void remove_pending(const std::string& task);
  /// True when nothing is pending.
  [[nodiscard]] bool ready() const;
  /// Pending task names, sorted.
  [[nodiscard]] std::vector<std::string> pending() const;

 private:
  mutable std::mutex mutex_;
  std::set<std::string> pending_;
};

}  // namespace meshnode::telemetry
