#include "state/workload.hpp"

namespace meshnode::state {

std::string_view to_string(TunnelProtocol protocol) noexcept {
  switch (protocol) {
    case TunnelProtocol::kNone:
      return "NONE";
    case TunnelProtocol::kHbone:
      return "HBONE";
  }
  return "UNKNOWN";
}

base::SpiffeId Workload::identity() const {
  return base::SpiffeId{
      .trust_domain = trust_domain.empty() ? std::string("cluster.local") : trust_domain,
      .ns = ns,
      .service_account = service_account.empty() ? std::string("default") : service_account,
  };
}

}  // namespace meshnode::state
