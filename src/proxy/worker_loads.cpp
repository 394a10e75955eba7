#include "proxy/worker_loads.hpp"

namespace meshnode::proxy {

WorkerLoads::WorkerLoads(std::size_t workers)
    : slots_(std::make_unique<Slot[]>(workers == 0 ? 1 : workers)), size_(workers == 0 ? 1 : workers) {}

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
