#include "state/snapshot.hpp"

namespace meshnode::state {

using base::Errc;
using base::fail;

Result<std::shared_ptr<const StateSnapshot>> StateSnapshot::build(std::vector<Workload> workloads,
                                                                  std::vector<Service> services,
                                                                  std::vector<Authorization> policies) {
  std::vector<std::shared_ptr<const Workload>> shared;
  shared.reserve(workloads.size());
  for (auto& w : workloads) shared.push_back(std::make_shared<const Workload>(std::move(w)));
  return build(std::move(shared), std::move(services), std::move(policies));
}

Result<std::shared_ptr<const StateSnapshot>> StateSnapshot::build(
    std::vector<std::shared_ptr<const Workload>> workloads, std::vector<Service> services,
    std::vector<Authorization> policies) {
  auto snapshot = std::make_shared<StateSnapshot>(Token{});
  for (auto& w : workloads) {
    if (!w) return fail(Errc::kInvalidArgument, "null workload");
    if (auto r = snapshot->add_workload(std::move(w)); !r) return std::unexpected(std::move(r.error()));
  }
  for (auto& s : services) {
    if (auto r = snapshot->add_service(std::move(s)); !r) return std::unexpected(std::move(r.error()));
  }
  for (auto& p : policies) {
    if (auto r = snapshot->add_policy(std::move(p)); !r) return std::unexpected(std::move(r.error()));
  }
  snapshot->index_endpoints();
  // Global policies apply to every decision: index them once so a decision does not scan all.
  for (const auto& [key, policy] : snapshot->policies_) {
    if (policy.scope == Authorization::Scope::kGlobal) snapshot->global_policies_.push_back(&policy);
  }
  return std::shared_ptr<const StateSnapshot>(std::move(snapshot));
}

std::shared_ptr<const StateSnapshot> StateSnapshot::empty() {
  return std::make_shared<StateSnapshot>(Token{});
}

Result<void> StateSnapshot::add_workload(std::shared_ptr<const Workload> shared) {
  if (shared->uid.empty()) {
    return fail(Errc::kConfig, "workload '" + shared->ns + "/" + shared->name + "' has an empty uid");
  }
  if (workloads_.contains(shared->uid)) {
    return fail(Errc::kConfig, "duplicate workload uid '" + shared->uid + "'");
  }
  for (const auto& ip : shared->addresses) {
    auto [it, inserted] = workloads_by_address_.try_emplace(AddressKey{shared->network, ip}, shared);
    if (!inserted && it->second != shared) {
      return fail(Errc::kConfig, "workloads '" + it->second->uid + "' and '" + shared->uid +
                                     "' both have address " + shared->network + "/" + ip.to_string());
    }
  }
  workloads_.emplace(shared->uid, shared);
  return {};
}

Result<void> StateSnapshot::add_service(Service service) {
  std::string key = service.key();
  if (services_.contains(key)) return fail(Errc::kConfig, "duplicate service '" + key + "'");
  const Service& stored = services_.emplace(key, std::move(service)).first->second;
  for (const auto& vip : stored.vips) {
    auto [it, inserted] = services_by_vip_.try_emplace(AddressKey{vip.network, vip.address}, &stored);
    if (!inserted && it->second != &stored) {
      return fail(Errc::kConfig,
                  "services '" + it->second->key() + "' and '" + key + "' both have VIP " + vip.to_string());
    }
  }
  return {};
}

Result<void> StateSnapshot::add_policy(Authorization policy) {
  std::string key = policy.key();
  if (policies_.contains(key)) return fail(Errc::kConfig, "duplicate authorization policy '" + key + "'");
  policies_.emplace(std::move(key), std::move(policy));
  return {};
}

void StateSnapshot::index_endpoints() {
  // workloads_ iterates in uid order, so every endpoint list comes out sorted by uid: the
  // weighted pick in select_route depends on a stable order.
  for (const auto& [uid, workload] : workloads_) {
    for (const auto& [service_key, ports] : workload->services) {
      endpoints_[service_key].push_back(Endpoint{workload, ports});
    }
  }
}

std::shared_ptr<const Workload> StateSnapshot::workload_by_uid(std::string_view uid) const {
  auto it = workloads_.find(uid);
  return it == workloads_.end() ? nullptr : it->second;
}

std::shared_ptr<const Workload> StateSnapshot::workload_by_address(std::string_view network,
                                                                   const base::IpAddr& ip) const {
  auto it = workloads_by_address_.find(AddressKey{std::string(network), ip});
  return it == workloads_by_address_.end() ? nullptr : it->second;
}

const Service* StateSnapshot::service_by_key(std::string_view key) const {
  auto it = services_.find(key);
  return it == services_.end() ? nullptr : &it->second;
}

const Service* StateSnapshot::service_by_vip(std::string_view network, const base::IpAddr& ip) const {
  auto it = services_by_vip_.find(AddressKey{std::string(network), ip});
  return it == services_by_vip_.end() ? nullptr : it->second;
}

const Authorization* StateSnapshot::policy_by_key(std::string_view key) const {
  auto it = policies_.find(key);
  return it == policies_.end() ? nullptr : &it->second;
}

std::span<const Endpoint> StateSnapshot::endpoints(std::string_view service_key) const {
  auto it = endpoints_.find(service_key);
  if (it == endpoints_.end()) return {};
  return it->second;
}

std::vector<const Authorization*> StateSnapshot::policies_in_namespace(std::string_view ns) const {
  std::vector<const Authorization*> out;
  for (const auto& [key, policy] : policies_) {
    bool global = policy.scope == Authorization::Scope::kGlobal;
    bool in_ns = policy.scope == Authorization::Scope::kNamespace && policy.ns == ns;
    if ((ns.empty() && global) || (!ns.empty() && in_ns)) out.push_back(&policy);
  }
  return out;
}

}  // namespace meshnode::state
