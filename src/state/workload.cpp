#include "state/workload.hpp"

#include <stdexcept>

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

// Function-local statics: initialised on first use, never destroyed (workloads may outlive statics).
const InternedString& default_service_account() noexcept {
  static const auto* v = new InternedString(InternedString::immortal("default"));
  return *v;
}
const InternedString& default_trust_domain() noexcept {
  static const auto* v = new InternedString(InternedString::immortal("cluster.local"));
  return *v;
}
const InternedString& default_workload_type() noexcept {
  static const auto* v = new InternedString(InternedString::immortal("deployment"));
  return *v;
}
const InternedString& default_cluster_id() noexcept {
  static const auto* v = new InternedString(InternedString::immortal("Kubernetes"));
  return *v;
}

WorkloadServices::WorkloadServices(std::map<std::string, std::vector<PortMapping>> from) {
  entries_.reserve(from.size());
  for (auto& [key, ports] : from) entries_.emplace_back(InternedString(key), std::move(ports));
}

WorkloadServices::iterator WorkloadServices::lower_bound(std::string_view key) noexcept {
  return std::lower_bound(entries_.begin(), entries_.end(), key,
                          [](const value_type& e, std::string_view k) { return e.first.view() < k; });
}

WorkloadServices::const_iterator WorkloadServices::find(std::string_view key) const noexcept {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const value_type& e, std::string_view k) { return e.first.view() < k; });
  return it != entries_.end() && it->first.view() == key ? it : entries_.end();
}

const std::vector<PortMapping>& WorkloadServices::at(std::string_view key) const {
  auto it = find(key);
  if (it == end()) throw std::out_of_range("WorkloadServices::at: no service '" + std::string(key) + "'");
  return it->second;
}

std::vector<PortMapping>& WorkloadServices::operator[](std::string_view key) {
  auto it = lower_bound(key);
  if (it == entries_.end() || it->first.view() != key) it = entries_.emplace(it, InternedString(key), std::vector<PortMapping>{});
  return it->second;
}

bool WorkloadServices::emplace(InternedString key, std::vector<PortMapping> ports) {
  auto it = lower_bound(key);
  if (it != entries_.end() && it->first == key) return false;
  entries_.emplace(it, std::move(key), std::move(ports));
  return true;
}

base::SpiffeId Workload::identity() const {
  return base::SpiffeId{
      .trust_domain = trust_domain.empty() ? std::string("cluster.local") : trust_domain.str(),
      .ns = ns,
      .service_account = service_account.empty() ? std::string("default") : service_account.str(),
  };
}

}  // namespace meshnode::state
