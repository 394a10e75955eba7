#include "xds/store.hpp"

#include "authorization.pb.h"
#include "discovery.pb.h"
#include "workload.pb.h"
#include "xds/convert.hpp"

namespace meshnode::xds {
namespace {

using base::Errc;
using base::fail;
namespace discovery = envoy::service::discovery::v3;

std::string display_name(const std::string& name) { return name.empty() ? "(unnamed)" : name; }

// The Any payload of `r`, checked against the response type; nullptr + reason when unusable.
const std::string* payload(const discovery::Resource& r, std::string_view type_url, std::string& reason) {
  if (!r.has_resource()) {
    reason = "resource has no payload";
    return nullptr;
  }
  if (r.resource().type_url() != type_url) {
    reason = "payload type '" + r.resource().type_url() + "' does not match '" + std::string(type_url) + "'";
    return nullptr;
  }
  return &r.resource().value();
}

// "<network>/<ip>" → key; nullopt when the text after the last '/' is not an IP.
std::optional<std::pair<std::string, base::IpAddr>> address_key(std::string_view key) {
  auto slash = key.rfind('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto ip = base::IpAddr::parse(key.substr(slash + 1));
  if (!ip) return std::nullopt;
  return std::pair{std::string(key.substr(0, slash)), *ip};
}

}  // namespace

std::string ApplyOutcome::error_message() const {
  std::string out;
  for (const auto& r : rejected) {
    if (!out.empty()) out += "; ";
    out += r.name + ": " + r.reason;
  }
  return out;
}

Result<ResourceStore> ResourceStore::create(config::LocalConfig local) {
  // Validate the local config on its own first: its errors are the operator's, not the server's.
  auto probe = state::StateSnapshot::build(local.workloads, local.services, local.policies);
  if (!probe) return std::unexpected(std::move(probe.error()));
  ResourceStore store;
  for (auto& w : local.workloads) {
    store.local_uids_.insert(w.uid);
    for (const auto& ip : w.addresses) store.local_ips_.insert({w.network, ip});
    store.local_workloads_.push_back(std::make_shared<const state::Workload>(std::move(w)));
  }
  for (auto& s : local.services) {
    store.local_service_keys_.insert(s.key());
    for (const auto& v : s.vips) store.local_vips_.insert({v.network, v.address});
    store.local_services_.push_back(std::move(s));
  }
  for (auto& p : local.policies) {
    store.local_policy_keys_.insert(p.key());
    store.local_policies_.push_back(std::move(p));
  }
  return store;
}

ApplyOutcome ResourceStore::apply(const discovery::DeltaDiscoveryResponse& response) {
  ApplyOutcome out;
  if (response.type_url() == kAddressType) {
    apply_addresses(response, out);
  } else if (response.type_url() == kAuthorizationType) {
    apply_policies(response, out);
  } else {
    out.unknown_type = true;
  }
  return out;
}

Result<void> ResourceStore::check_workload(const std::string& name, const state::Workload& w) const {
  if (local_uids_.contains(w.uid)) return fail(Errc::kConfig, "uid '" + w.uid + "' is defined by the local config");
  if (auto it = workload_uids_.find(w.uid); it != workload_uids_.end() && it->second != name) {
    return fail(Errc::kConfig, "uid '" + w.uid + "' is already held by resource '" + it->second + "'");
  }
  for (const auto& ip : w.addresses) {
    if (local_ips_.contains({w.network, ip})) {
      return fail(Errc::kConfig, "address " + w.network + "/" + ip.to_string() + " belongs to a local workload");
    }
  }
  return {};
}

Result<void> ResourceStore::check_service(const std::string& name, const state::Service& s) const {
  std::string key = s.key();
  if (local_service_keys_.contains(key)) {
    return fail(Errc::kConfig, "service '" + key + "' is defined by the local config");
  }
  if (auto it = service_keys_.find(key); it != service_keys_.end() && it->second != name) {
    return fail(Errc::kConfig, "service '" + key + "' is already held by resource '" + it->second + "'");
  }
  for (const auto& v : s.vips) {
    if (local_vips_.contains({v.network, v.address})) {
      return fail(Errc::kConfig, "VIP " + v.to_string() + " belongs to a local service");
    }
  }
  return {};
}

bool ResourceStore::erase_address(const std::string& name) {
  auto it = addresses_.find(name);
  if (it == addresses_.end()) return false;
  const AddressEntry& e = it->second;
  if (e.workload) {
    workload_uids_.erase(e.workload->uid);
    for (const auto& ip : e.workload->addresses) {
      auto owner = ip_owner_.find({e.workload->network, ip});
      if (owner != ip_owner_.end() && owner->second == name) ip_owner_.erase(owner);
    }
  } else {
    service_keys_.erase(e.service->key());
    for (const auto& v : e.service->vips) {
      auto owner = vip_owner_.find({v.network, v.address});
      if (owner != vip_owner_.end() && owner->second == name) vip_owner_.erase(owner);
    }
  }
  shadowed_.erase(name);
  addresses_.erase(it);
  return true;
}

void ResourceStore::put_address(const std::string& name, std::string version,
                                std::shared_ptr<const state::Workload> w, std::shared_ptr<const state::Service> s) {
  erase_address(name);
  // The newest claim on an address wins; the previous owner keeps its other addresses.
  auto claim = [&](std::map<AddressKey, std::string>& owners, AddressKey key) {
    auto [it, inserted] = owners.try_emplace(std::move(key), name);
    if (!inserted && it->second != name) {
      shadowed_.insert(it->second);
      it->second = name;
    }
  };
  if (w) {
    workload_uids_[w->uid] = name;
    for (const auto& ip : w->addresses) claim(ip_owner_, {w->network, ip});
  } else {
    service_keys_[s->key()] = name;
    for (const auto& v : s->vips) claim(vip_owner_, {v.network, v.address});
  }
  addresses_.insert_or_assign(name, AddressEntry{std::move(version), std::move(w), std::move(s)});
}

Result<void> ResourceStore::upsert_workload(const std::string& name, const std::string& version,
                                            const istio::workload::Workload& in) {
  auto w = to_workload(in);
  if (!w) return std::unexpected(std::move(w.error()));
  if (auto ok = check_workload(name, *w); !ok) return ok;
  put_address(name, version, std::make_shared<const state::Workload>(std::move(*w)), nullptr);
  return {};
}

Result<void> ResourceStore::upsert_service(const std::string& name, const std::string& version,
                                           const istio::workload::Service& in) {
  auto s = to_service(in);
  if (!s) return std::unexpected(std::move(s.error()));
  if (auto ok = check_service(name, *s); !ok) return ok;
  put_address(name, version, nullptr, std::make_shared<const state::Service>(std::move(*s)));
  return {};
}

void ResourceStore::apply_addresses(const discovery::DeltaDiscoveryResponse& response, ApplyOutcome& out) {
  for (const auto& name : response.removed_resources()) {
    if (erase_address(name)) ++out.removed;
  }
  // One message reused for every resource: its buffers are recycled between parses.
  istio::workload::Address address;
  for (const auto& r : response.resources()) {
    std::string reason;
    const std::string* bytes = payload(r, kAddressType, reason);
    if (bytes != nullptr && !address.ParseFromString(*bytes)) {
      reason = "payload does not decode as istio.workload.Address";
      bytes = nullptr;
    }
    if (bytes == nullptr) {
      out.rejected.push_back({display_name(r.name()), std::move(reason)});
      continue;
    }
    Result<void> ok = address.has_workload()  ? upsert_workload(r.name(), r.version(), address.workload())
                      : address.has_service() ? upsert_service(r.name(), r.version(), address.service())
                                              : fail(Errc::kConfig, "Address has neither a workload nor a service");
    if (ok) {
      ++out.upserted;
    } else {
      out.rejected.push_back({display_name(r.name()), ok.error().context});
    }
  }
}

void ResourceStore::apply_policies(const discovery::DeltaDiscoveryResponse& response, ApplyOutcome& out) {
  for (const auto& name : response.removed_resources()) {
    auto it = policies_.find(name);
    if (it == policies_.end()) continue;
    policy_keys_.erase(it->second.policy->key());
    policies_.erase(it);
    ++out.removed;
  }
  istio::security::Authorization message;
  for (const auto& r : response.resources()) {
    std::string reason;
    const std::string* bytes = payload(r, kAuthorizationType, reason);
    if (bytes != nullptr && !message.ParseFromString(*bytes)) {
      reason = "payload does not decode as istio.security.Authorization";
      bytes = nullptr;
    }
    if (bytes == nullptr) {
      out.rejected.push_back({display_name(r.name()), std::move(reason)});
      continue;
    }
    auto policy = to_authorization(message);
    if (policy) {
      std::string key = policy->key();
      auto held = policy_keys_.find(key);
      if (local_policy_keys_.contains(key)) {
        policy = fail(Errc::kConfig, "policy '" + key + "' is defined by the local config");
      } else if (held != policy_keys_.end() && held->second != r.name()) {
        policy = fail(Errc::kConfig, "policy '" + key + "' is already held by resource '" + held->second + "'");
      }
    }
    if (!policy) {
      out.rejected.push_back({display_name(r.name()), policy.error().context});
      continue;
    }
    if (auto old = policies_.find(r.name()); old != policies_.end()) policy_keys_.erase(old->second.policy->key());
    policy_keys_[policy->key()] = r.name();
    policies_.insert_or_assign(r.name(),
                               PolicyEntry{r.version(), std::make_shared<const state::Authorization>(std::move(*policy))});
    ++out.upserted;
  }
}

std::shared_ptr<const state::Workload> ResourceStore::visible(const std::string& name,
                                                              const std::shared_ptr<const state::Workload>& w) const {
  if (!shadowed_.contains(name)) return w;
  auto copy = std::make_shared<state::Workload>(*w);
  std::erase_if(copy->addresses, [&](const base::IpAddr& ip) {
    auto owner = ip_owner_.find({w->network, ip});
    return owner == ip_owner_.end() || owner->second != name;
  });
  return copy;
}

Result<std::shared_ptr<const state::StateSnapshot>> ResourceStore::build() const {
  std::vector<std::shared_ptr<const state::Workload>> workloads = local_workloads_;
  std::vector<state::Service> services = local_services_;
  std::vector<state::Authorization> policies = local_policies_;
  workloads.reserve(workloads.size() + workload_uids_.size());
  services.reserve(services.size() + service_keys_.size());
  policies.reserve(policies.size() + policies_.size());
  for (const auto& [name, e] : addresses_) {
    if (e.workload) {
      workloads.push_back(visible(name, e.workload));
    } else if (!shadowed_.contains(name)) {
      services.push_back(*e.service);
    } else {
      state::Service s = *e.service;
      std::erase_if(s.vips, [&](const state::NetworkAddress& v) {
        auto owner = vip_owner_.find({v.network, v.address});
        return owner == vip_owner_.end() || owner->second != name;
      });
      services.push_back(std::move(s));
    }
  }
  for (const auto& [name, e] : policies_) policies.push_back(*e.policy);
  return state::StateSnapshot::build(std::move(workloads), std::move(services), std::move(policies));
}

std::map<std::string, std::string> ResourceStore::versions(std::string_view type_url) const {
  std::map<std::string, std::string> out;
  if (type_url == kAddressType) {
    for (const auto& [name, e] : addresses_) out.emplace(name, e.version);
  } else if (type_url == kAuthorizationType) {
    for (const auto& [name, e] : policies_) out.emplace(name, e.version);
  }
  return out;
}

bool ResourceStore::knows(std::string_view key) const {
  std::string k(key);
  if (addresses_.contains(k) || service_keys_.contains(k) || workload_uids_.contains(k)) return true;
  auto addr = address_key(key);
  return addr && (ip_owner_.contains(*addr) || vip_owner_.contains(*addr));
}

}  // namespace meshnode::xds
