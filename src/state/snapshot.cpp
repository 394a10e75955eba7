#include "state/snapshot.hpp"

#include <algorithm>
#include <tuple>

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
  if (auto r = snapshot->index_workloads(std::move(workloads)); !r)
    return std::unexpected(std::move(r.error()));
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

Result<void> StateSnapshot::index_workloads(std::vector<std::shared_ptr<const Workload>> workloads) {
  workloads_.reserve(workloads.size());
  std::size_t address_count = 0;
  for (auto& w : workloads) {
    if (!w) return fail(Errc::kInvalidArgument, "null workload");
    if (w->uid.empty())
      return fail(Errc::kConfig, "workload '" + w->ns + "/" + w->name + "' has an empty uid");
    address_count += w->addresses.size();
    std::string_view uid = w->uid;
    workloads_.emplace_back(uid, std::move(w));
  }
  // Inputs often arrive sorted already (a previous snapshot, a local file in uid order): check first.
  auto by_uid = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(workloads_.begin(), workloads_.end(), by_uid))
    std::sort(workloads_.begin(), workloads_.end(), by_uid);
  for (std::size_t i = 1; i < workloads_.size(); ++i) {
    if (workloads_[i].first == workloads_[i - 1].first) {
      return fail(Errc::kConfig, "duplicate workload uid '" + std::string(workloads_[i].first) + "'");
    }
  }
  workloads_by_address_.reserve(address_count);
  for (std::uint32_t i = 0; i < workloads_.size(); ++i) {
    const Workload& w = *workloads_[i].second;
    for (const auto& ip : w.addresses) workloads_by_address_.push_back(WorkloadAddress{ip, w.network, i});
  }
  auto key = [](const WorkloadAddress& a) { return std::tie(a.ip, a.network); };
  // Index order breaks ties, so of two workloads claiming one address the lower uid is named first.
  std::sort(workloads_by_address_.begin(), workloads_by_address_.end(),
            [&](const WorkloadAddress& a, const WorkloadAddress& b) {
              return std::tie(a.ip, a.network, a.index) < std::tie(b.ip, b.network, b.index);
            });
  for (std::size_t i = 1; i < workloads_by_address_.size(); ++i) {
    const auto& a = workloads_by_address_[i - 1];
    const auto& b = workloads_by_address_[i];
    if (key(a) == key(b) && a.index != b.index) {  // one workload listing an IP twice is harmless
      return fail(Errc::kConfig, "workloads '" + workloads_[a.index].second->uid + "' and '" +
                                     workloads_[b.index].second->uid + "' both have address " +
                                     std::string(a.network) + "/" + a.ip.to_string());
    }
  }
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
      auto it = endpoints_.find(service_key);
      if (it == endpoints_.end()) it = endpoints_.emplace(service_key, std::vector<Endpoint>{}).first;
      it->second.push_back(Endpoint{workload, ports});
    }
  }
}

std::shared_ptr<const Workload> StateSnapshot::workload_by_uid(std::string_view uid) const {
  auto it = std::lower_bound(workloads_.begin(), workloads_.end(), uid,
                             [](const auto& entry, std::string_view key) { return entry.first < key; });
  return it == workloads_.end() || it->first != uid ? nullptr : it->second;
}

std::shared_ptr<const Workload> StateSnapshot::workload_by_address(std::string_view network,
                                                                   const base::IpAddr& ip) const {
  auto it = std::lower_bound(
      workloads_by_address_.begin(), workloads_by_address_.end(), std::tie(ip, network),
      [](const WorkloadAddress& a, const auto& key) { return std::tie(a.ip, a.network) < key; });
  if (it == workloads_by_address_.end() || it->ip != ip || it->network != network) return nullptr;
  return workloads_[it->index].second;
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
