#include "state/snapshot.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace meshnode::state {

using base::Errc;
using base::fail;

namespace {

bool by_uid_less(const std::shared_ptr<const Workload>& a, const std::shared_ptr<const Workload>& b) {
  return a->uid < b->uid;
}

// Sorts by `less` unless already sorted (inputs often arrive in order: a local file, a store).
template <class T, class Less>
void sort_if_needed(std::vector<T>& v, Less less) {
  if (!std::is_sorted(v.begin(), v.end(), less)) std::sort(v.begin(), v.end(), less);
}

// Merges two lists sorted by `less` into one; `b` wins on equal keys (the caller makes them unique).
template <class T, class Less>
std::vector<T> merge_sorted(std::vector<T> a, std::vector<T> b, Less less) {
  std::vector<T> out;
  out.reserve(a.size() + b.size());
  std::merge(std::make_move_iterator(a.begin()), std::make_move_iterator(a.end()),
             std::make_move_iterator(b.begin()), std::make_move_iterator(b.end()), std::back_inserter(out), less);
  return out;
}

// From this many workloads on, a build walks them in memory order (see apply_workloads); below,
// they fit in the cache and the sort would cost more than it saves.
constexpr std::size_t kMemoryOrderFrom = 2048;

// Equal interned values share one entry, so its address is a valid (and cheap) hash.
struct ByEntry {
  std::size_t operator()(const InternedString& s) const noexcept { return std::hash<const void*>{}(s.data()); }
};

}  // namespace

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
  StateDelta all;
  all.workloads = std::move(workloads);
  all.services = std::move(services);
  all.policies = std::move(policies);
  return StateSnapshot(Token{}).apply(std::move(all));
}

std::shared_ptr<const StateSnapshot> StateSnapshot::empty() {
  return std::make_shared<StateSnapshot>(Token{});
}

Result<std::shared_ptr<const StateSnapshot>> StateSnapshot::apply(StateDelta delta) const {
  auto next = std::make_shared<StateSnapshot>(Token{});
  // Copies of the chunk lists: every chunk is shared until a change lands in it.
  next->workloads_ = workloads_;
  next->workloads_by_address_ = workloads_by_address_;
  next->services_ = services_;
  next->services_by_vip_ = services_by_vip_;
  next->endpoints_ = endpoints_;
  next->policies_ = policies_;
  if (auto r = next->apply_workloads(std::move(delta.workloads), std::move(delta.removed_workloads)); !r)
    return std::unexpected(std::move(r.error()));
  if (auto r = next->apply_services(std::move(delta.services), std::move(delta.removed_services)); !r)
    return std::unexpected(std::move(r.error()));
  if (delta.policies) {
    if (auto r = next->index_policies(std::move(*delta.policies)); !r) return std::unexpected(std::move(r.error()));
  }
  return std::shared_ptr<const StateSnapshot>(std::move(next));
}

Result<void> StateSnapshot::apply_workloads(std::vector<std::shared_ptr<const Workload>> upserts,
                                            std::vector<std::string> removed) {
  if (upserts.empty() && removed.empty()) return {};
  for (const auto& w : upserts) {
    if (!w) return fail(Errc::kInvalidArgument, "null workload");
  }
  // Every walk below that reads inside the workloads (uids, addresses, services, reference counts)
  // goes through them in memory order: unless they come sorted by uid, many of them are first put
  // in the order of their addresses (a sort of pointers, no workload read). 100,000 workloads are
  // far bigger than the cache, and the caller's order (the xDS store's hash order) is not memory
  // order: walked in it, or in uid order, every workload cost a few cache misses (issue #12).
  // Only compact arrays are read in uid order: `uids` (the uid views, in uid order) and `by_uid`
  // (uid order → index into upserts; empty when the upserts are already sorted by uid).
  const std::size_t n = upserts.size();
  const bool sorted = std::is_sorted(upserts.begin(), upserts.end(), by_uid_less);
  if (!sorted && n >= kMemoryOrderFrom) {
    std::sort(upserts.begin(), upserts.end(),
              [](const auto& a, const auto& b) { return std::less<const Workload*>{}(a.get(), b.get()); });
  }
  // (Should several workloads of a big build lack a uid, which one is named is unspecified; the
  // xDS store never passes one.)
  for (const auto& w : upserts) {
    if (w->uid.empty()) return fail(Errc::kConfig, "workload '" + w->ns + "/" + w->name + "' has an empty uid");
  }
  std::vector<std::string_view> uids;
  std::vector<std::uint32_t> by_uid;
  uids.reserve(n);
  if (sorted) {
    for (const auto& w : upserts) uids.emplace_back(w->uid);
    for (std::size_t i = 1; i < n; ++i) {
      if (uids[i] == uids[i - 1]) return fail(Errc::kConfig, "duplicate workload uid '" + upserts[i]->uid + "'");
    }
  } else {
    // Sort (uid view, index) pairs, not the pointers: a compare then reads the uid bytes directly
    // instead of chasing workload → uid (the 100,000-workload initial push spends most of its
    // snapshot time here).
    // Uids share long prefixes ("Kubernetes//Pod/<ns>/"): each entry also carries the 16 bytes
    // after the common prefix of all of them as two big-endian integers, so most compares are two
    // integer compares and only ties read the strings.
    struct Keyed {
      std::uint64_t hi, lo;
      std::string_view uid;
      std::uint32_t index;
    };
    std::string_view first = upserts[0]->uid;
    std::size_t common = first.size();
    for (const auto& w : upserts) {
      std::size_t m = std::min(common, w->uid.size());
      std::size_t k = 0;
      while (k < m && w->uid[k] == first[k]) ++k;
      common = k;
    }
    auto window = [common](std::string_view uid, std::size_t at) {
      std::uint64_t v = 0;
      for (std::size_t b = 0; b < 8; ++b) {
        std::size_t pos = common + at + b;
        v = (v << 8) | (pos < uid.size() ? static_cast<unsigned char>(uid[pos]) : 0u);
      }
      return v;
    };
    std::vector<Keyed> order;
    order.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::string_view uid = upserts[i]->uid;
      order.push_back({window(uid, 0), window(uid, 8), uid, i});
    }
    // Consistent with uid order: a uid that is a prefix of another pads with 0, never above it.
    std::sort(order.begin(), order.end(), [](const Keyed& a, const Keyed& b) {
      if (a.hi != b.hi) return a.hi < b.hi;
      if (a.lo != b.lo) return a.lo < b.lo;
      return a.uid < b.uid;
    });
    // Equal uids have equal windows: only then are the strings read.
    for (std::size_t k = 1; k < n; ++k) {
      const Keyed& a = order[k - 1];
      const Keyed& b = order[k];
      if (a.hi == b.hi && a.lo == b.lo && a.uid == b.uid)
        return fail(Errc::kConfig, "duplicate workload uid '" + std::string(b.uid) + "'");
    }
    by_uid.reserve(n);
    for (const auto& k : order) {
      uids.push_back(k.uid);
      by_uid.push_back(k.index);
    }
  }
  sort_if_needed(removed, std::less<>{});
  // One change per uid, in uid order; an upsert of a removed uid replaces it.
  std::vector<WorkloadMap::Change> changes;
  changes.reserve(n + removed.size());
  std::vector<std::shared_ptr<const Workload>> olds;  // the versions this delta replaces or removes
  // Where each upsert's change is, in uid order: its value is moved in once the address and
  // endpoint indexes have taken their copies (a copy here would cost 100,000 reference-count round
  // trips on a full build, each a cache miss on the workload's control block).
  std::vector<std::size_t> upsert_at;
  upsert_at.reserve(n);
  {
    std::size_t r = 0;
    auto remember_old = [&](std::string_view uid) {
      if (workloads_.empty()) return;
      if (const auto* old = workloads_.find(uid)) olds.push_back(old->second);
    };
    for (std::string_view uid : uids) {
      for (; r < removed.size() && removed[r] < uid; ++r) {
        if (r > 0 && removed[r] == removed[r - 1]) continue;
        remember_old(removed[r]);
        changes.emplace_back(removed[r], std::nullopt);
      }
      if (r < removed.size() && removed[r] == uid) ++r;
      remember_old(uid);
      upsert_at.push_back(changes.size());
      changes.emplace_back(uid, std::nullopt);  // filled below
    }
    for (; r < removed.size(); ++r) {
      if (r > 0 && removed[r] == removed[r - 1]) continue;
      remember_old(removed[r]);
      changes.emplace_back(removed[r], std::nullopt);
    }
  }
  if (auto ok = apply_addresses(olds, upserts); !ok) return ok;
  {
    // rank[i]: the uid-order position of upserts[i] (endpoint lists are in uid order).
    std::vector<std::uint32_t> rank;
    if (!by_uid.empty()) {
      rank.resize(n);
      for (std::uint32_t k = 0; k < n; ++k) rank[by_uid[k]] = k;
    }
    apply_endpoints(olds, upserts, rank);
  }
  for (std::size_t k = 0; k < n; ++k)
    changes[upsert_at[k]].second = std::move(upserts[by_uid.empty() ? k : by_uid[k]]);
  workloads_.apply(changes);
  return {};
}

Result<void> StateSnapshot::apply_addresses(const std::vector<std::shared_ptr<const Workload>>& olds,
                                            const std::vector<std::shared_ptr<const Workload>>& upserts) {
  // (key, workload or null = the old owner leaves it); sorted by key, leaves before claims, then uid.
  struct Claim {
    AddressKey key;
    const std::shared_ptr<const Workload>* workload;  // null: an old version's address, released
    // IpAddr order (family, then the 16 address bytes) as integers, so that the sort of 100,000
    // claims compares integers instead of calling memcmp.
    std::uint64_t family, hi, lo;
  };
  auto claim = [](const base::IpAddr& ip, const InternedString& network, const std::shared_ptr<const Workload>* w) {
    std::string_view raw = ip.bytes();  // 4 or 16 bytes; an IPv4 address is stored zero-padded
    auto word = [&](std::size_t at) {
      std::uint64_t v = 0;
      for (std::size_t b = at; b < at + 8; ++b) v = (v << 8) | (b < raw.size() ? static_cast<unsigned char>(raw[b]) : 0u);
      return v;
    };
    return Claim{{ip, network}, w, static_cast<std::uint64_t>(ip.family()), word(0), word(8)};
  };
  std::vector<Claim> claims;
  claims.reserve(olds.size() + upserts.size());  // most workloads have one address
  for (const auto& w : olds) {
    for (const auto& ip : w->addresses) claims.push_back(claim(ip, w->network, nullptr));
  }
  for (const auto& w : upserts) {
    for (const auto& ip : w->addresses) claims.push_back(claim(ip, w->network, &w));
  }
  auto order = [](const Claim& a, const Claim& b) {
    if (a.family != b.family) return a.family < b.family;
    if (a.hi != b.hi) return a.hi < b.hi;
    if (a.lo != b.lo) return a.lo < b.lo;
    if (a.key.network != b.key.network) return a.key.network.view() < b.key.network.view();
    if ((a.workload == nullptr) != (b.workload == nullptr)) return a.workload == nullptr;
    return a.workload != nullptr && (*a.workload)->uid < (*b.workload)->uid;
  };
  sort_if_needed(claims, order);
  // The integer key mirrors IpAddr's own order; should IpAddr's layout ever change, fall back to
  // comparing the keys themselves rather than publish a mis-sorted index.
  if (!std::is_sorted(claims.begin(), claims.end(),
                      [](const Claim& a, const Claim& b) { return AddressLess{}(a.key, b.key); })) {
    std::stable_sort(claims.begin(), claims.end(), [&](const Claim& a, const Claim& b) {
      if (AddressLess{}(a.key, b.key)) return true;
      if (AddressLess{}(b.key, a.key)) return false;
      return order(a, b);
    });
  }
  std::vector<AddressMap::Change> changes;
  changes.reserve(claims.size());
  auto clash = [](const Workload& a, const Workload& b, const AddressKey& key) {
    const Workload& first = a.uid < b.uid ? a : b;
    const Workload& second = a.uid < b.uid ? b : a;
    return fail(Errc::kConfig, "workloads '" + first.uid + "' and '" + second.uid + "' both have address " +
                                   key.network + "/" + key.ip.to_string());
  };
  for (std::size_t i = 0; i < claims.size();) {
    std::size_t j = i;
    bool released = false;
    const std::shared_ptr<const Workload>* owner = nullptr;
    for (; j < claims.size() && !AddressLess{}(claims[i].key, claims[j].key); ++j) {
      if (claims[j].workload == nullptr) {
        released = true;
      } else if (owner == nullptr) {
        owner = claims[j].workload;
      } else if ((*owner)->uid != (*claims[j].workload)->uid) {  // one workload listing an IP twice is fine
        return clash(**owner, **claims[j].workload, claims[i].key);
      }
    }
    if (owner != nullptr && !released) {
      // A claim on an address an unchanged workload of this snapshot holds.
      if (const auto* held = workloads_by_address_.find(claims[i].key); held && held->second->uid != (*owner)->uid)
        return clash(*held->second, **owner, claims[i].key);
    }
    if (owner != nullptr) {
      changes.emplace_back(claims[i].key, *owner);
    } else {
      changes.emplace_back(claims[i].key, std::nullopt);
    }
    i = j;
  }
  workloads_by_address_.apply(changes);
  return {};
}

void StateSnapshot::apply_endpoints(const std::vector<std::shared_ptr<const Workload>>& olds,
                                    const std::vector<std::shared_ptr<const Workload>>& upserts,
                                    std::span<const std::uint32_t> rank) {
  // New endpoints per service key, collected in the upserts' (memory) order with their uid rank,
  // then put in uid order: the weighted pick in select_route depends on a stable order.
  struct Ranked {
    std::uint32_t rank;
    Endpoint endpoint;
  };
  std::unordered_map<InternedString, std::vector<Ranked>, ByEntry> collected;
  for (std::size_t i = 0; i < upserts.size(); ++i) {
    const auto& w = upserts[i];
    auto r = rank.empty() ? static_cast<std::uint32_t>(i) : rank[i];
    for (const auto& [key, ports] : w->services) collected[key].push_back(Ranked{r, Endpoint{w, ports}});
  }
  std::unordered_set<std::string_view> changed;  // uids whose old endpoints leave
  std::vector<InternedString> keys;
  keys.reserve(collected.size());
  for (const auto& [key, list] : collected) keys.push_back(key);
  for (const auto& w : olds) {
    changed.insert(w->uid);
    for (const auto& [key, ports] : w->services) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end(), ViewLess{});
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<EndpointMap::Change> changes;
  changes.reserve(keys.size());
  auto endpoint_order = [](const Endpoint& a, const Endpoint& b) { return a.workload->uid < b.workload->uid; };
  for (auto& key : keys) {
    std::vector<Endpoint> kept;
    if (const auto* held = endpoints_.find(key)) {
      kept.reserve(held->second->size());
      for (const auto& e : *held->second) {
        if (!changed.contains(e.workload->uid)) kept.push_back(e);
      }
    }
    std::vector<Endpoint> added;
    if (auto it = collected.find(key); it != collected.end()) {
      std::vector<Ranked>& list = it->second;
      sort_if_needed(list, [](const Ranked& a, const Ranked& b) { return a.rank < b.rank; });
      added.reserve(list.size());
      for (auto& e : list) added.push_back(std::move(e.endpoint));
    }
    std::vector<Endpoint> list = kept.empty() ? std::move(added)
                                 : added.empty() ? std::move(kept)
                                                 : merge_sorted(std::move(kept), std::move(added), endpoint_order);
    if (list.empty()) {
      changes.emplace_back(std::move(key), std::nullopt);
    } else {
      changes.emplace_back(std::move(key), std::make_shared<const std::vector<Endpoint>>(std::move(list)));
    }
  }
  endpoints_.apply(changes);
}

Result<void> StateSnapshot::apply_services(std::vector<Service> upserts, std::vector<std::string> removed) {
  if (upserts.empty() && removed.empty()) return {};
  std::vector<std::pair<InternedString, Service>> keyed;
  keyed.reserve(upserts.size());
  for (auto& s : upserts) {
    std::string key = s.key();
    keyed.emplace_back(InternedString(std::string_view(key)), std::move(s));
  }
  auto by_key = [](const auto& a, const auto& b) { return ViewLess{}(a.first, b.first); };
  sort_if_needed(keyed, by_key);
  for (std::size_t i = 1; i < keyed.size(); ++i) {
    if (keyed[i].first == keyed[i - 1].first) return fail(Errc::kConfig, "duplicate service '" + keyed[i].first + "'");
  }
  sort_if_needed(removed, std::less<>{});
  // VIP claims and releases, as for workload addresses (value: the service key).
  struct Claim {
    AddressKey key;
    const InternedString* service;  // null: an old version's VIP, released
  };
  std::vector<Claim> claims;
  std::vector<ServiceMap::Change> changes;
  changes.reserve(keyed.size() + removed.size());
  auto release_old = [&](std::string_view key) {
    if (const auto* old = services_.find(key)) {
      for (const auto& v : old->second.vips) claims.push_back({{v.address, InternedString(std::string_view(v.network))}, nullptr});
    }
  };
  std::size_t r = 0;
  auto remove_below = [&](const InternedString* bound) {
    for (; r < removed.size() && (bound == nullptr || removed[r] < bound->view()); ++r) {
      if (r > 0 && removed[r] == removed[r - 1]) continue;
      release_old(removed[r]);
      changes.emplace_back(InternedString(std::string_view(removed[r])), std::nullopt);
    }
    if (bound != nullptr && r < removed.size() && removed[r] == bound->view()) ++r;
  };
  for (auto& [key, service] : keyed) {
    remove_below(&key);
    release_old(key);
    for (const auto& v : service.vips) claims.push_back({{v.address, InternedString(std::string_view(v.network))}, &key});
  }
  remove_below(nullptr);
  auto order = [](const Claim& a, const Claim& b) {
    if (AddressLess{}(a.key, b.key)) return true;
    if (AddressLess{}(b.key, a.key)) return false;
    if ((a.service == nullptr) != (b.service == nullptr)) return a.service == nullptr;
    return a.service != nullptr && ViewLess{}(*a.service, *b.service);
  };
  std::sort(claims.begin(), claims.end(), order);
  auto clash = [](const InternedString& a, const InternedString& b, const AddressKey& key) {
    bool a_first = ViewLess{}(a, b);
    return fail(Errc::kConfig, "services '" + (a_first ? a : b) + "' and '" + (a_first ? b : a) +
                                   "' both have VIP " + key.network + "/" + key.ip.to_string());
  };
  std::vector<VipMap::Change> vip_changes;
  for (std::size_t i = 0; i < claims.size();) {
    std::size_t j = i;
    bool released = false;
    const InternedString* owner = nullptr;
    for (; j < claims.size() && !AddressLess{}(claims[i].key, claims[j].key); ++j) {
      if (claims[j].service == nullptr) {
        released = true;
      } else if (owner == nullptr) {
        owner = claims[j].service;
      } else if (*owner != *claims[j].service) {
        return clash(*owner, *claims[j].service, claims[i].key);
      }
    }
    if (owner != nullptr && !released) {
      if (const auto* held = services_by_vip_.find(claims[i].key); held && held->second != *owner)
        return clash(held->second, *owner, claims[i].key);
    }
    if (owner != nullptr) {
      vip_changes.emplace_back(claims[i].key, *owner);
    } else {
      vip_changes.emplace_back(claims[i].key, std::nullopt);
    }
    i = j;
  }
  // Service changes in key order: merge the removals (already in `changes`) with the upserts.
  std::vector<ServiceMap::Change> upsert_changes;
  upsert_changes.reserve(keyed.size());
  for (auto& [key, service] : keyed) upsert_changes.emplace_back(key, std::move(service));
  auto change_order = [](const ServiceMap::Change& a, const ServiceMap::Change& b) {
    return ViewLess{}(a.first, b.first);
  };
  changes = merge_sorted(std::move(changes), std::move(upsert_changes), change_order);
  services_.apply(changes);
  services_by_vip_.apply(vip_changes);
  return {};
}

Result<void> StateSnapshot::index_policies(std::vector<Authorization> policies) {
  auto index = std::make_shared<PolicyIndex>();
  for (auto& p : policies) {
    std::string key = p.key();
    if (index->map.contains(key)) return fail(Errc::kConfig, "duplicate authorization policy '" + key + "'");
    index->map.emplace(std::move(key), std::move(p));
  }
  // Global policies apply to every decision: index them once so a decision does not scan all.
  for (const auto& [key, policy] : index->map) {
    if (policy.scope == Authorization::Scope::kGlobal) index->global.push_back(&policy);
  }
  policies_ = std::move(index);
  return {};
}

std::shared_ptr<const Workload> StateSnapshot::workload_by_uid(std::string_view uid) const {
  const auto* entry = workloads_.find(uid);
  return entry == nullptr ? nullptr : entry->second;
}

std::shared_ptr<const Workload> StateSnapshot::workload_by_address(std::string_view network,
                                                                   const base::IpAddr& ip) const {
  const auto* entry = workloads_by_address_.find(AddressLookup{ip, network});
  return entry == nullptr ? nullptr : entry->second;
}

const Service* StateSnapshot::service_by_key(std::string_view key) const {
  const auto* entry = services_.find(key);
  return entry == nullptr ? nullptr : &entry->second;
}

const Service* StateSnapshot::service_by_vip(std::string_view network, const base::IpAddr& ip) const {
  const auto* entry = services_by_vip_.find(AddressLookup{ip, network});
  return entry == nullptr ? nullptr : service_by_key(entry->second);
}

const Authorization* StateSnapshot::policy_by_key(std::string_view key) const {
  auto it = policies_->map.find(key);
  return it == policies_->map.end() ? nullptr : &it->second;
}

std::span<const Endpoint> StateSnapshot::endpoints(std::string_view service_key) const {
  const auto* entry = endpoints_.find(service_key);
  if (entry == nullptr) return {};
  return *entry->second;
}

std::vector<const Authorization*> StateSnapshot::policies_in_namespace(std::string_view ns) const {
  std::vector<const Authorization*> out;
  for (const auto& [key, policy] : policies_->map) {
    bool global = policy.scope == Authorization::Scope::kGlobal;
    bool in_ns = policy.scope == Authorization::Scope::kNamespace && policy.ns == ns;
    if ((ns.empty() && global) || (!ns.empty() && in_ns)) out.push_back(&policy);
  }
  return out;
}

}  // namespace meshnode::state
