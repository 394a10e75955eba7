#include "state/service.hpp"

namespace meshnode::state {

std::string NetworkAddress::to_string() const { return network + "/" + address.to_string(); }

std::optional<std::uint16_t> Service::target_port(std::uint16_t service_port) const {
  for (const auto& p : ports) {
    if (p.service_port == service_port) return p.target_port;
  }
  return std::nullopt;
}

}  // namespace meshnode::state
