#include "state/authorization.hpp"

namespace meshnode::state {

bool Match::empty() const noexcept {
  return namespaces.empty() && not_namespaces.empty() && principals.empty() && not_principals.empty() &&
         source_ips.empty() && not_source_ips.empty() && destination_ips.empty() &&
         not_destination_ips.empty() && destination_ports.empty() && not_destination_ports.empty() &&
         service_accounts.empty() && not_service_accounts.empty();
}

std::string_view to_string(Authorization::Scope scope) noexcept {
  switch (scope) {
    case Authorization::Scope::kGlobal:
      return "Global";
    case Authorization::Scope::kNamespace:
      return "Namespace";
    case Authorization::Scope::kWorkloadSelector:
      return "WorkloadSelector";
  }
  return "Unknown";
}

std::string_view to_string(Authorization::Action action) noexcept {
  switch (action) {
    case Authorization::Action::kAllow:
      return "Allow";
    case Authorization::Action::kDeny:
      return "Deny";
  }
  return "Unknown";
}

}  // namespace meshnode::state
