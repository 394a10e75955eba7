#include "telemetry/readiness.hpp"

namespace meshnode::telemetry {

void Readiness::add_pending(std::string task) {
  std::lock_guard lock(mutex_);
  pending_.insert(std::move(task));
}

void Readiness::remove_pending(const std::string& task) {
  std::lock_guard lock(mutex_);
  pending_.erase(task);
}

bool Readiness::ready() const {
  std::lock_guard lock(mutex_);
  return pending_.empty();
}

std::vector<std::string> Readiness::pending() const {
  std::lock_guard lock(mutex_);
  return {pending_.begin(), pending_.end()};
}

}  // namespace meshnode::telemetry
