#include "xds/store.hpp"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <thread>

#include "authorization.pb.h"
#include "base/prefetch.hpp"
#include "workload.pb.h"
#include "xds/convert.hpp"

namespace meshnode::xds {
namespace {

using base::Errc;
using base::fail;

std::string display_name(std::string_view name) { return name.empty() ? "(unnamed)" : std::string(name); }

// The Any payload of `r`, checked against the response type; false + reason when unusable.
bool payload(const ResourceView& r, std::string_view type_url, std::string_view& bytes, std::string& reason) {
  if (!r.has_payload) {
    reason = "resource has no payload";
    return false;
  }
  if (r.payload_type != type_url) {
    reason =
        "payload type '" + std::string(r.payload_type) + "' does not match '" + std::string(type_url) + "'";
    return false;
  }
  bytes = r.payload;
  return true;
}

// "<network>/<ip>" → key; nullopt when the text after the last '/' is not an IP.
std::optional<std::pair<std::string_view, base::IpAddr>> address_key(std::string_view key) {
  auto slash = key.rfind('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto ip = base::IpAddr::parse(key.substr(slash + 1));
  if (!ip) return std::nullopt;
  return std::pair{key.substr(0, slash), *ip};
}

// OwnerIndex's hash of a (network, IP) claim; a free function so that the decode threads compute
// it too (DecodedAddress::claim_hash).
std::size_t claim_hash(std::string_view network, const base::IpAddr& ip) noexcept {
  std::size_t h = std::hash<base::IpAddr>{}(ip);
  return network.empty() ? h : h ^ (std::hash<std::string_view>{}(network) * 0x9e3779b97f4a7c15ULL);
}

// The mechanics the store's flat tables (NameIndex, OwnerIndex) share: a power-of-two array of
// slots, each with the `hash` it was placed by, linear probing, at most 7/8 full. `occupied(slot)`
// tells a used slot from an empty (default-constructed) one.

// Whether a table of `slots` slots holding `used` entries must grow first.
bool too_full(std::size_t used, std::size_t slots) noexcept { return used * 8 > slots * 7; }

// The number of slots that holds `entries` without growing.
std::size_t slots_for(std::size_t entries) noexcept {
  std::size_t want = 16;
  while (want * 7 / 8 < entries) want *= 2;
  return want;
}

// Moves every used slot into a new array of `count` slots. The new array is allocated first:
// should that fail, the table is left as it was (moving a slot cannot fail).
template <class Slot, class Occupied>
void regrow(std::vector<Slot>& slots, std::size_t count, Occupied occupied) {
  std::vector<Slot> grown(count);
  const std::size_t mask = count - 1;
  for (Slot& s : slots) {
    if (!occupied(s)) continue;
    std::size_t i = s.hash & mask;
    while (occupied(grown[i])) i = (i + 1) & mask;
    grown[i] = std::move(s);
  }
  slots = std::move(grown);
}

// Empties used slot `i` by backward-shift deletion: later members of its probe run move into the
// hole, so no tombstones are needed.
template <class Slot, class Occupied>
void erase_slot(std::vector<Slot>& slots, std::size_t i, Occupied occupied) {
  const std::size_t mask = slots.size() - 1;
  for (std::size_t j = (i + 1) & mask; occupied(slots[j]); j = (j + 1) & mask) {
    std::size_t home = slots[j].hash & mask;
    // Slot j may move to i unless its home lies cyclically in (i, j].
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      slots[i] = std::move(slots[j]);
      i = j;
    }
  }
  slots[i] = Slot{};
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

ApplyOutcome ResourceStore::apply(const ResponseView& response) {
  ApplyOutcome out;
  if (response.type_url == kAddressType) {
    apply_addresses(response, out);
  } else if (response.type_url == kAuthorizationType) {
    apply_policies(response, out);
  } else {
    out.unknown_type = true;
  }
  return out;
}

Result<void> ResourceStore::check_workload(std::string_view name, bool name_is_uid,
                                           const state::Workload& w) const {
  if (local_uids_.contains(w.uid))
    return fail(Errc::kConfig, "uid '" + w.uid + "' is defined by the local config");
  if (auto it = workload_uids_.find(w.uid); it != workload_uids_.end() && it->second != name) {
    return fail(Errc::kConfig,
                "uid '" + w.uid + "' is already held by resource '" + std::string(it->second) + "'");
  }
  if (!name_is_uid) {
    const Held* held = addresses_.find(NameKey(w.uid));
    if (held != nullptr && held->second.workload && held->second.workload->uid == w.uid) {
      return fail(Errc::kConfig, "uid '" + w.uid + "' is already held by resource '" + w.uid + "'");
    }
  }
  for (const auto& ip : w.addresses) {
    if (local_ips_.contains({w.network, ip})) {
      return fail(Errc::kConfig,
                  "address " + w.network + "/" + ip.to_string() + " belongs to a local workload");
    }
  }
  return {};
}

Result<void> ResourceStore::check_service(std::string_view name, const state::Service& s) const {
  std::string key = s.key();
  if (local_service_keys_.contains(key)) {
    return fail(Errc::kConfig, "service '" + key + "' is defined by the local config");
  }
  if (auto it = service_keys_.find(key); it != service_keys_.end() && it->second != name) {
    return fail(Errc::kConfig,
                "service '" + key + "' is already held by resource '" + std::string(it->second) + "'");
  }
  for (const auto& v : s.vips) {
    if (local_vips_.contains({v.network, v.address})) {
      return fail(Errc::kConfig, "VIP " + v.to_string() + " belongs to a local service");
    }
  }
  return {};
}

void ResourceStore::OwnerIndex::prefetch(std::size_t h) const noexcept {
  if (!slots_.empty()) base::prefetch(slots_.data() + (h & (slots_.size() - 1)));
}

bool ResourceStore::OwnerIndex::holds(const Held& owner, std::string_view network, const base::IpAddr& ip) noexcept {
  const AddressEntry& e = owner.second;
  if (e.workload) {
    return e.workload->network == network &&
           std::find(e.workload->addresses.begin(), e.workload->addresses.end(), ip) != e.workload->addresses.end();
  }
  return std::any_of(e.service->vips.begin(), e.service->vips.end(),
                     [&](const state::NetworkAddress& v) { return v.address == ip && v.network == network; });
}

std::size_t ResourceStore::OwnerIndex::slot_of(std::size_t h, std::string_view network, const base::IpAddr& ip) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.owner == nullptr || (s.hash == h && holds(*s.owner, network, ip))) return i;
  }
}

void ResourceStore::OwnerIndex::rehash(std::size_t slots) {
  regrow(slots_, slots, [](const Slot& s) { return s.owner != nullptr; });
}

void ResourceStore::OwnerIndex::reserve(std::size_t claims) {
  if (std::size_t want = slots_for(claims); want > slots_.size()) rehash(want);
}

const ResourceStore::Held* ResourceStore::OwnerIndex::find(std::string_view network, const base::IpAddr& ip) const {
  if (used_ == 0) return nullptr;
  return slots_[slot_of(claim_hash(network, ip), network, ip)].owner;
}

const ResourceStore::Held* ResourceStore::OwnerIndex::claim(std::string_view network, const base::IpAddr& ip,
                                                            const Held* owner) {
  if (too_full(used_ + 1, slots_.size())) rehash(slots_.empty() ? 16 : slots_.size() * 2);
  std::size_t h = claim_hash(network, ip);
  Slot& s = slots_[slot_of(h, network, ip)];
  const Held* previous = s.owner;
  if (previous == nullptr) ++used_;
  s = Slot{h, owner};
  return previous;
}

void ResourceStore::OwnerIndex::release(std::string_view network, const base::IpAddr& ip, const Held* owner) {
  if (used_ == 0) return;
  std::size_t i = slot_of(claim_hash(network, ip), network, ip);
  if (slots_[i].owner != owner) return;
  erase_slot(slots_, i, [](const Slot& s) { return s.owner != nullptr; });
  --used_;
}

std::size_t ResourceStore::NameIndex::slot_of(const NameKey& key) const noexcept {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = key.hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (!s.held || (s.hash == key.hash && s.held->first.name == key.name)) return i;
  }
}

ResourceStore::Held* ResourceStore::NameIndex::find(const NameKey& key) const noexcept {
  if (used_ == 0) return nullptr;
  return slots_[slot_of(key)].held.get();
}

ResourceStore::Held& ResourceStore::NameIndex::insert(NameKey key, AddressEntry entry) {
  if (too_full(used_ + 1, slots_.size())) rehash(slots_.empty() ? 16 : slots_.size() * 2);
  Slot& s = slots_[slot_of(key)];
  s.hash = key.hash;
  s.held = std::make_unique<Held>(key, std::move(entry));
  ++used_;
  return *s.held;
}

void ResourceStore::NameIndex::erase(const Held* held) noexcept {
  // The element is freed when its slot is overwritten (by a shifted slot or the empty one).
  erase_slot(slots_, slot_of(held->first), [](const Slot& s) { return s.held != nullptr; });
  --used_;
}

void ResourceStore::NameIndex::rehash(std::size_t slots) {
  regrow(slots_, slots, [](const Slot& s) { return s.held != nullptr; });
}

void ResourceStore::NameIndex::reserve(std::size_t names) {
  if (std::size_t want = slots_for(names); want > slots_.size()) rehash(want);
}

void ResourceStore::NameIndex::prefetch(std::size_t h) const noexcept {
  if (!slots_.empty()) base::prefetch(slots_.data() + (h & (slots_.size() - 1)));
}

bool ResourceStore::erase_address(std::string_view name) {
  const Held* self = addresses_.find(NameKey(name));
  if (self == nullptr) return false;
  const AddressEntry& e = self->second;
  auto release = [&](OwnerIndex& owners, std::string_view network, const base::IpAddr& ip) {
    owners.release(network, ip, self);
  };
  touch(name);
  if (e.workload) {
    --workload_count_;
    if (!rebuild_) removed_uids_.push_back(e.workload->uid);
    if (e.workload->uid != name) workload_uids_.erase(e.workload->uid);
    for (const auto& ip : e.workload->addresses) release(ip_owner_, e.workload->network, ip);
  } else {
    --service_count_;
    if (!rebuild_) removed_service_keys_.push_back(e.service->key());
    service_keys_.erase(e.service->key());
    for (const auto& v : e.service->vips) release(vip_owner_, v.network, v.address);
  }
  if (!shadowed_.empty()) {
    if (auto gone = shadowed_.find(name); gone != shadowed_.end()) shadowed_.erase(gone);
  }
  addresses_.erase(self);
  return true;
}

void ResourceStore::put_address(NameKey name, bool name_is_uid, state::InternedString version,
                                std::shared_ptr<const state::Workload> w,
                                std::shared_ptr<const state::Service> s) {
  AddressEntry entry{std::move(version), std::move(w), std::move(s), nullptr};
  NameKey key = name;
  name_is_uid = name_is_uid && entry.workload;
  if (name_is_uid) {
    key.name = entry.workload->uid;  // lives as long as the entry holds the workload
  } else {
    entry.own_name = std::make_unique<const std::string>(name.name);
    key.name = *entry.own_name;
  }
  // A new name (the initial push: 100,000 of them) costs two probes of one slot run and reads no
  // element unless a stored hash matches; a name we hold is replaced.
  if (addresses_.find(name) != nullptr) erase_address(name.name);
  Held& held = addresses_.insert(key, std::move(entry));
  std::string_view stored = held.first.name;
  const AddressEntry& e = held.second;
  const Held* self = &held;
  touch(stored);
  // The newest claim on an address wins; the previous owner keeps its other addresses.
  auto claim = [&](OwnerIndex& owners, std::string_view network, const base::IpAddr& ip) {
    const Held* previous = owners.claim(network, ip, self);
    if (previous != nullptr && previous != self) {
      shadowed_.emplace(previous->first.name);
      touch(previous->first.name);  // its visible addresses shrink
    }
  };
  if (e.workload) {
    ++workload_count_;
    // The common case, resource name == uid, needs no index: addresses_ answers it.
    if (!name_is_uid) workload_uids_[e.workload->uid] = stored;
    for (const auto& ip : e.workload->addresses) claim(ip_owner_, e.workload->network, ip);
  } else {
    ++service_count_;
    service_keys_[e.service->key()] = stored;
    for (const auto& v : e.service->vips) claim(vip_owner_, v.network, v.address);
  }
}

namespace {

// One Address resource decoded and converted: the pure, parallelisable half of apply().
struct DecodedAddress {
  std::shared_ptr<const state::Workload> workload;
  std::shared_ptr<const state::Service> service;
  state::InternedString version;
  std::string error;  // non-empty: rejected
  // Computed here, on the decode threads, for the serial indexing pass: the resource name's hash,
  // whether it is the workload's uid, and the hash of the workload's first address claim.
  std::size_t name_hash = 0;
  std::size_t claim_hash = 0;
  bool name_is_uid = false;
};

DecodedAddress decode_address(const ResourceView& r, istio::workload::Address& scratch,
                              state::InternedStringBatch& strings) {
  DecodedAddress out;
  std::string_view bytes;
  if (!payload(r, kAddressType, bytes, out.error)) return out;
  {
    state::Workload w;
    if (fast_workload_from_address(bytes, strings, w)) {
      out.workload = std::make_shared<const state::Workload>(std::move(w));
      return out;
    }
  }
  if (bytes.size() > 0x7fffffffu || !scratch.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    out.error = "payload does not decode as istio.workload.Address";
  } else if (scratch.has_workload()) {
    auto w = to_workload(scratch.workload(), strings);
    if (w) out.workload = std::make_shared<const state::Workload>(std::move(*w));
    if (!w) out.error = std::move(w.error().context);
  } else if (scratch.has_service()) {
    auto sv = to_service(scratch.service());
    if (sv) out.service = std::make_shared<const state::Service>(std::move(*sv));
    if (!sv) out.error = std::move(sv.error().context);
  } else {
    out.error = "Address has neither a workload nor a service";
  }
  return out;
}

// Decodes resources [begin, end) into `out`. Payloads are parsed into an arena reset every 512
// resources: bump allocation and no per-field frees.
void decode_range(const ResponseView& response, std::size_t begin, std::size_t end,
                  std::vector<DecodedAddress>& out) {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 * 1024;
  options.max_block_size = 1024 * 1024;
  google::protobuf::Arena arena(options);
  state::InternedStringBatch strings;
  for (std::size_t i = begin; i < end; ++i) {
    if ((i - begin) % 512 == 511) arena.Reset();
    auto& scratch = *google::protobuf::Arena::CreateMessage<istio::workload::Address>(&arena);
    DecodedAddress& d = out[i];
    const ResourceView& r = response.resources[i];
    d = decode_address(r, scratch, strings);
    if (!d.error.empty()) continue;
    d.version = strings.get(r.version, 14);
    d.name_hash = std::hash<std::string_view>{}(r.name);
    if (d.workload) {
      d.name_is_uid = d.workload->uid == r.name;
      if (!d.workload->addresses.empty())
        d.claim_hash = claim_hash(d.workload->network, d.workload->addresses.front());
    }
  }
}

// Big responses (the initial push of a large cluster) are decoded on a few short-lived threads:
// conversion is pure, and it is most of the apply time (xDS apply benchmark).
std::vector<DecodedAddress> decode_all(const ResponseView& response) {
  constexpr std::size_t kPerThread = 8192;
  const std::size_t n = response.resources.size();
  std::vector<DecodedAddress> out(n);
  std::size_t threads = std::clamp<std::size_t>(
      n / kPerThread, 1, std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 4));
  std::vector<std::thread> helpers;
  const std::size_t chunk = (n + threads - 1) / threads;
  for (std::size_t t = 1; t < threads; ++t) {
    helpers.emplace_back([&response, &out, t, chunk, n] {
      decode_range(response, t * chunk, std::min(n, (t + 1) * chunk), out);
    });
  }
  decode_range(response, 0, std::min(n, chunk), out);
  for (auto& h : helpers) h.join();
  return out;
}

}  // namespace

void ResourceStore::apply_addresses(const ResponseView& response, ApplyOutcome& out) {
  for (std::string_view name : response.removed_resources) {
    if (erase_address(name)) ++out.removed;
  }
  std::vector<DecodedAddress> decoded = decode_all(response);
  // Grow the indexes once, not a rehash at every doubling of a 100,000-resource response.
  addresses_.reserve(addresses_.size() + decoded.size());
  ip_owner_.reserve(ip_owner_.size() + decoded.size());
  // 100,000 fresh resources miss the cache on every index they enter: start loading the next ones'
  // workload and first claim slot while this one is indexed.
  constexpr std::size_t kAhead = 8;
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    if (i + kAhead < decoded.size()) {
      const DecodedAddress& next = decoded[i + kAhead];
      addresses_.prefetch(next.name_hash);
      if (next.workload) {
        base::prefetch(next.workload.get());
        ip_owner_.prefetch(next.claim_hash);
      }
    }
    const ResourceView& r = response.resources[i];
    DecodedAddress& d = decoded[i];
    Result<void> ok = !d.error.empty() ? fail(Errc::kConfig, std::move(d.error))
                      : d.workload     ? check_workload(r.name, d.name_is_uid, *d.workload)
                                       : check_service(r.name, *d.service);
    if (!ok) {
      out.rejected.push_back({display_name(r.name), ok.error().context});
      continue;
    }
    put_address(NameKey(r.name, d.name_hash), d.name_is_uid, std::move(d.version), std::move(d.workload),
                std::move(d.service));
    ++out.upserted;
  }
}

void ResourceStore::apply_policies(const ResponseView& response, ApplyOutcome& out) {
  for (std::string_view name : response.removed_resources) {
    auto it = policies_.find(std::string(name));
    if (it == policies_.end()) continue;
    policy_keys_.erase(it->second.policy->key());
    policies_.erase(it);
    policies_changed_ = true;
    ++out.removed;
  }
  istio::security::Authorization message;
  for (const ResourceView& r : response.resources) {
    std::string reason;
    std::string_view bytes;
    bool usable = payload(r, kAuthorizationType, bytes, reason);
    if (usable && (bytes.size() > 0x7fffffffu ||
                   !message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))) {
      reason = "payload does not decode as istio.security.Authorization";
      usable = false;
    }
    if (!usable) {
      out.rejected.push_back({display_name(r.name), std::move(reason)});
      continue;
    }
    auto policy = to_authorization(message);
    if (policy) {
      std::string key = policy->key();
      auto held = policy_keys_.find(key);
      if (local_policy_keys_.contains(key)) {
        policy = fail(Errc::kConfig, "policy '" + key + "' is defined by the local config");
      } else if (held != policy_keys_.end() && held->second != r.name) {
        policy =
            fail(Errc::kConfig, "policy '" + key + "' is already held by resource '" + held->second + "'");
      }
    }
    if (!policy) {
      out.rejected.push_back({display_name(r.name), policy.error().context});
      continue;
    }
    std::string name(r.name);
    if (auto old = policies_.find(name); old != policies_.end())
      policy_keys_.erase(old->second.policy->key());
    policy_keys_[policy->key()] = name;
    policies_.insert_or_assign(std::move(name),
                               PolicyEntry{std::string(r.version),
                                           std::make_shared<const state::Authorization>(std::move(*policy))});
    policies_changed_ = true;
    ++out.upserted;
  }
}

std::shared_ptr<const state::Workload> ResourceStore::visible(
    std::string_view name, const std::shared_ptr<const state::Workload>& w) const {
  if (shadowed_.empty() || !shadowed_.contains(name)) return w;
  auto copy = std::make_shared<state::Workload>(*w);
  std::erase_if(copy->addresses, [&](const base::IpAddr& ip) {
    const Held* owner = ip_owner_.find(w->network, ip);
    return owner == nullptr || owner->first.name != name;
  });
  return copy;
}

state::Service ResourceStore::visible(std::string_view name, const state::Service& s) const {
  state::Service out = s;
  if (shadowed_.empty() || !shadowed_.contains(name)) return out;
  std::erase_if(out.vips, [&](const state::NetworkAddress& v) {
    const Held* owner = vip_owner_.find(v.network, v.address);
    return owner == nullptr || owner->first.name != name;
  });
  return out;
}

void ResourceStore::touch(std::string_view name) {
  if (rebuild_) return;
  // A big batch (the initial push, a resync) is cheaper to build from scratch than to diff.
  if (touched_.size() > 64 && touched_.size() > (workload_count_ + service_count_) / 8) {
    rebuild_ = true;
    touched_.clear();
    removed_uids_.clear();
    removed_service_keys_.clear();
    return;
  }
  touched_.emplace_back(name);
}

Result<std::shared_ptr<const state::StateSnapshot>> ResourceStore::build_full() const {
  std::vector<std::shared_ptr<const state::Workload>> workloads = local_workloads_;
  std::vector<state::Service> services = local_services_;
  std::vector<state::Authorization> policies = local_policies_;
  workloads.reserve(workloads.size() + workload_count_);
  services.reserve(services.size() + service_count_);
  policies.reserve(policies.size() + policies_.size());
  addresses_.for_each([&](const Held& held) {
    const auto& [name, e] = held;
    if (e.workload) {
      workloads.push_back(visible(name.name, e.workload));
    } else {
      services.push_back(visible(name.name, *e.service));
    }
  });
  for (const auto& [name, e] : policies_) policies.push_back(*e.policy);
  return state::StateSnapshot::build(std::move(workloads), std::move(services), std::move(policies));
}

Result<std::shared_ptr<const state::StateSnapshot>> ResourceStore::build() const {
  auto reset = [&] {
    touched_.clear();
    removed_uids_.clear();
    removed_service_keys_.clear();
    policies_changed_ = false;
  };
  if (!rebuild_ && base_) {
    state::StateDelta delta;
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (const auto& name : touched_) {
      const Held* held = addresses_.find(NameKey(name));
      if (held == nullptr) continue;  // removed: its uid or key is in removed_*
      if (held->second.workload) {
        delta.workloads.push_back(visible(name, held->second.workload));
      } else {
        delta.services.push_back(visible(name, *held->second.service));
      }
    }
    delta.removed_workloads = std::move(removed_uids_);
    delta.removed_services = std::move(removed_service_keys_);
    if (policies_changed_) {
      delta.policies.emplace(local_policies_);
      for (const auto& [name, e] : policies_) delta.policies->push_back(*e.policy);
    }
    reset();
    if (delta.empty()) return base_;
    auto next = base_->apply(std::move(delta));
    if (next) {
      base_ = *next;
      return base_;
    }
    // A bug (apply() keeps the inputs consistent): start over from scratch, which names it.
  }
  reset();
  auto full = build_full();
  if (!full) {
    rebuild_ = true;
    return full;
  }
  base_ = *full;
  rebuild_ = false;
  return base_;
}

std::map<std::string, std::string> ResourceStore::versions(std::string_view type_url) const {
  std::map<std::string, std::string> out;
  if (type_url == kAddressType) {
    addresses_.for_each([&](const Held& held) { out.emplace(std::string(held.first.name), held.second.version.str()); });
  } else if (type_url == kAuthorizationType) {
    for (const auto& [name, e] : policies_) out.emplace(name, e.version);
  }
  return out;
}

bool ResourceStore::knows(std::string_view key) const {
  std::string k(key);
  if (addresses_.find(NameKey(key)) != nullptr || service_keys_.contains(k) || workload_uids_.contains(key)) return true;
  auto addr = address_key(key);
  return addr && (ip_owner_.find(addr->first, addr->second) != nullptr ||
                  vip_owner_.find(addr->first, addr->second) != nullptr);
}

}  // namespace meshnode::xds
