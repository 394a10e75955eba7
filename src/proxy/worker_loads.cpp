#include "proxy/worker_loads.hpp"

#include <string>

namespace meshnode::proxy {

WorkerLoads::WorkerLoads(std::size_t workers, telemetry::MetricsRegistry* registry)
    : slots_(std::make_unique<Slot[]>(workers == 0 ? 1 : workers)), size_(workers == 0 ? 1 : workers) {
  if (registry == nullptr) return;
  for (std::size_t w = 0; w < size_; ++w) {
    slots_[w].gauge = &registry->gauge("meshnode_worker_open_connections",
                                       "Open connections (outbound, inbound plaintext, inbound HBONE) served by each "
                                       "data worker; each accepted connection goes to the worker with the fewest",
                                       {{"worker", std::to_string(w)}});
  }
  handoffs_ = &registry->counter("meshnode_worker_handoffs_total",
                                 "Connections accepted on one data worker's listener and served by another, less loaded one");
}

std::size_t WorkerLoads::pick(std::size_t here) const noexcept {
  std::size_t best = here;
  std::size_t fewest = open(here);
  for (std::size_t w = 0; w < size_; ++w) {
    if (w == here) continue;
    const std::size_t n = open(w);
    if (n < fewest) {
      best = w;
      fewest = n;
    }
  }
  return best;
}

}  // namespace meshnode::proxy
