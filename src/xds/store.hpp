#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/prefetch.hpp"
#include "config/local_config.hpp"
#include "state/snapshot.hpp"
#include "xds/response.hpp"  // also declares DeltaDiscoveryResponse

namespace meshnode::xds {

using base::Result;

/// One resource of a response that was not applied, for the NACK's error_detail.
struct Rejection {
  std::string name;    ///< the Resource.name as the server sent it ("(unnamed)" if empty)
  std::string reason;  ///< why, e.g. "addresses[0] has 3 bytes (expected 4 or 16)"

  friend bool operator==(const Rejection&, const Rejection&) = default;
};

/// What applying one response did.
struct ApplyOutcome {
  std::vector<Rejection> rejected;  ///< in response order
  std::size_t upserted = 0;         ///< resources added or replaced
  std::size_t removed = 0;          ///< names in removed_resources that we held
  bool unknown_type = false;        ///< the response's type_url is neither of ours (nothing applied)

  [[nodiscard]] bool changed() const noexcept { return upserted + removed > 0; }
  /// "name: reason; name: reason" (research §2.3 NACK error_detail.message); empty when none.
  [[nodiscard]] std::string error_message() const;
};

/// The converted xDS resources of both types (Address, Authorization) plus the static local
/// config, merged into one StateSnapshot per build(). Conversion happens in apply(), once per
/// resource; build() shares the converted workloads, so a snapshot costs indexes, not copies.
///
/// Partial accept (research §2.3): a resource that cannot be converted, or that would collide with
/// another one, is rejected by name and the rest of the response is applied; a rejected name keeps
/// whatever version we held before (versions() then reports that older version, so a reconnect
/// asks for it again). Collisions: a uid, service key ("ns/hostname") or policy key
/// ("ns/name") already held under another resource name, or anything that the local config
/// defines (local config wins), is rejected. Two xDS workloads claiming one (network, IP) do not
/// fail: the newer claim wins (as in the reference), and the older workload stays reachable by
/// uid and its other addresses; likewise for service VIPs.
///
/// Not thread-safe: owned and used by one thread (the xDS client's loop). A response of more than
/// 16,384 Address resources is decoded on up to 4 short-lived helper threads (pure conversion);
/// the store itself is only touched by the calling thread.
class ResourceStore {
 public:
  /// @param local the LOCAL_XDS_PATH content (may be empty); it is part of every snapshot.
  /// Errc::kConfig if the local config alone does not build (duplicate uid, IP, VIP, key).
  [[nodiscard]] static Result<ResourceStore> create(config::LocalConfig local);

  /// Applies one Delta xDS response: removals first, then each resource in order.
  /// Never fails as a whole; see ApplyOutcome. Pure (no I/O). The views need only live for the
  /// call: what the store keeps is copied.
  ApplyOutcome apply(const ResponseView& response);
  /// The same, for a parsed message (tests, the fake control plane).
  ApplyOutcome apply(const envoy::service::discovery::v3::DeltaDiscoveryResponse& response) {
    return apply(ResponseView::of(response));
  }

  /// A snapshot of local config + every accepted xDS resource. Errc::kConfig only on a bug
  /// (apply() keeps the inputs consistent); the caller then keeps its previous snapshot.
  /// Incremental: derived from the previous build() by StateSnapshot::apply() with what the
  /// responses since then touched (plus workloads/services that lost an address to a newer
  /// claim), so its cost follows the delta; after a big response (more than an eighth of what we
  /// hold changed) or an error it is built from scratch. Either way it equals a full build.
  /// Called again without apply() in between, it returns the same snapshot.
  [[nodiscard]] Result<std::shared_ptr<const state::StateSnapshot>> build() const;

  /// Always builds from scratch (tests compare it with the incremental build()).
  [[nodiscard]] Result<std::shared_ptr<const state::StateSnapshot>> build_full_for_test() const {
    return build_full();
  }

  /// Accepted resource name → version for `type_url` (initial_resource_versions on reconnect).
  [[nodiscard]] std::map<std::string, std::string> versions(std::string_view type_url) const;

  /// Whether an on-demand key is answered by what we hold: a resource name, a service key
  /// "ns/hostname", or "<network>/<ip>" of a workload or service VIP.
  [[nodiscard]] bool knows(std::string_view key) const;

  [[nodiscard]] std::size_t workload_count() const noexcept { return workload_count_; }
  [[nodiscard]] std::size_t service_count() const noexcept { return service_count_; }
  [[nodiscard]] std::size_t policy_count() const noexcept { return policies_.size(); }

 private:
  // A resource name and its hash. The hash of a big response's names is computed on the decode
  // threads, so the serial pass that indexes 100,000 resources hashes none of them.
  struct NameKey {
    std::string_view name;
    std::size_t hash;
    explicit NameKey(std::string_view n) : name(n), hash(std::hash<std::string_view>{}(n)) {}
    NameKey(std::string_view n, std::size_t h) : name(n), hash(h) {}
    friend bool operator==(const NameKey& a, const NameKey& b) noexcept {
      return a.hash == b.hash && a.name == b.name;
    }
  };

  using AddressKey = std::pair<std::string, base::IpAddr>;
  struct AddressEntry {
    state::InternedString version;  // istiod versions repeat across resources
    std::shared_ptr<const state::Workload> workload;  // exactly one of workload/service is set
    std::shared_ptr<const state::Service> service;
    // The resource name when the key cannot view the workload's uid (name != uid, services).
    std::unique_ptr<const std::string> own_name;
  };
  struct PolicyEntry {
    std::string version;
    std::shared_ptr<const state::Authorization> policy;
  };

  ResourceStore() = default;
  void apply_addresses(const ResponseView& response, ApplyOutcome& out);
  void apply_policies(const ResponseView& response, ApplyOutcome& out);
  [[nodiscard]] Result<void> check_workload(std::string_view name, bool name_is_uid,
                                            const state::Workload& w) const;
  [[nodiscard]] Result<void> check_service(std::string_view name, const state::Service& s) const;
  // `name` with its hash; `name_is_uid`: the workload's uid equals the name (ignored for services).
  void put_address(NameKey name, bool name_is_uid, state::InternedString version,
                   std::shared_ptr<const state::Workload> w, std::shared_ptr<const state::Service> s);
  bool erase_address(std::string_view name);
  [[nodiscard]] std::shared_ptr<const state::Workload> visible(
      std::string_view name, const std::shared_ptr<const state::Workload>& w) const;
  [[nodiscard]] state::Service visible(std::string_view name, const state::Service& s) const;
  [[nodiscard]] Result<std::shared_ptr<const state::StateSnapshot>> build_full() const;
  // Records that resource `name` must be re-read by the next incremental build().
  void touch(std::string_view name);

  // Static local config: always in the snapshot, never replaced by xDS.
  std::vector<std::shared_ptr<const state::Workload>> local_workloads_;
  std::vector<state::Service> local_services_;
  std::vector<state::Authorization> local_policies_;
  std::set<std::string, std::less<>> local_uids_, local_service_keys_, local_policy_keys_;
  std::set<AddressKey> local_ips_, local_vips_;

  // Indexes hold views: into the keys of addresses_ (each element is its own allocation, so
  // stable until erased) and into the converted workloads (immutable, owned by addresses_).
  // erase_address() drops the views first.
  using Held = std::pair<const NameKey, AddressEntry>;  // an element of addresses_

  // By resource name: a flat open-addressing table of (name hash, element). A probe compares
  // hashes in the table and reads an element only on a hash match, so inserting 100,000 fresh
  // names reads no element at all, and the slot a name will probe can be prefetched from its
  // hash (std::unordered_map chased a bucket pointer and a node per insert: 6 % of a
  // 100,000-workload apply, issue #12). Elements are allocated one by one and never move.
  class NameIndex {
   public:
    /// The element named `key`; nullptr if none.
    [[nodiscard]] Held* find(const NameKey& key) const noexcept;
    /// Adds an element; `key` must not be present (find() first). `key.name` must view memory
    /// that lives as long as the element (its workload's uid or its own_name).
    Held& insert(NameKey key, AddressEntry entry);
    /// Removes and frees `held` (an element of this index).
    void erase(const Held* held) noexcept;
    void reserve(std::size_t names);
    /// A hint: starts loading the slot a name of hash `h` probes first.
    void prefetch(std::size_t h) const noexcept;
    [[nodiscard]] std::size_t size() const noexcept { return used_; }
    /// Calls `f(const Held&)` for every element, in no particular order. A walk of 100,000
    /// elements in hash order misses the cache on each element and on its workload: both are
    /// prefetched a few slots ahead.
    template <class F>
    void for_each(F&& f) const {
      constexpr std::size_t kAhead = 8;
      const std::size_t n = slots_.size();
      for (std::size_t i = 0; i < n; ++i) {
        if (i + 2 * kAhead < n && slots_[i + 2 * kAhead].held) base::prefetch(slots_[i + 2 * kAhead].held.get());
        if (i + kAhead < n && slots_[i + kAhead].held) prefetch_payload(*slots_[i + kAhead].held);
        if (slots_[i].held) f(*slots_[i].held);
      }
    }

   private:
    struct Slot {
      std::size_t hash = 0;
      std::unique_ptr<Held> held;  // nullptr = empty
    };
    [[nodiscard]] std::size_t slot_of(const NameKey& key) const noexcept;  // its slot or the empty one
    // The cache lines a walk reads of the element's workload or service: its first bytes and the
    // shared_ptr control block just before them (make_shared).
    static void prefetch_payload(const Held& held) noexcept {
      const void* p = held.second.workload ? static_cast<const void*>(held.second.workload.get())
                                           : static_cast<const void*>(held.second.service.get());
      base::prefetch(p);
      base::prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) - 16));
    }
    void rehash(std::size_t slots);
    std::vector<Slot> slots_;  // power-of-two size, at most 7/8 full
    std::size_t used_ = 0;
  };

  // (network, IP) → the resource holding the newest claim on it. A flat open-addressing table of
  // (hash, element of addresses_): the key is not stored, it is read back from the owner (its
  // workload's network and addresses, or its service's VIPs) — 16 bytes per claim instead of a
  // 64-byte hash node (the state-memory target, issue #12). An owner releases every claim it
  // holds before it leaves addresses_, so no slot outlives its element.
  class OwnerIndex {
   public:
    [[nodiscard]] const Held* find(std::string_view network, const base::IpAddr& ip) const;
    /// Makes `owner` the holder; returns the previous one (nullptr if none).
    const Held* claim(std::string_view network, const base::IpAddr& ip, const Held* owner);
    /// Drops the claim if `owner` holds it.
    void release(std::string_view network, const base::IpAddr& ip, const Held* owner);
    void reserve(std::size_t claims);
    /// Starts loading the slot a claim on (network, ip) will probe first (a hint; no effect on
    /// the contents).
    /// `h`: claim_hash() of the (network, IP) about to be claimed.
    void prefetch(std::size_t h) const noexcept;
    [[nodiscard]] std::size_t size() const noexcept { return used_; }

   private:
    struct Slot {
      std::size_t hash = 0;
      const Held* owner = nullptr;  // nullptr = empty
    };
    static bool holds(const Held& owner, std::string_view network, const base::IpAddr& ip) noexcept;
    [[nodiscard]] std::size_t slot_of(std::size_t h, std::string_view network, const base::IpAddr& ip) const;
    void rehash(std::size_t slots);
    std::vector<Slot> slots_;  // power-of-two size, at most 7/8 full
    std::size_t used_ = 0;
  };

  // By resource name. The key views the workload's uid when it is the name (the common case:
  // no second copy of 100,000 uids), else the entry's own_name.
  NameIndex addresses_;
  std::unordered_map<std::string, PolicyEntry> policies_;    // by resource name
  std::unordered_map<std::string_view, std::string_view>
      workload_uids_;  // uid → resource name, when they differ
  std::size_t workload_count_ = 0;
  std::size_t service_count_ = 0;
  std::unordered_map<std::string, std::string_view> service_keys_;  // "ns/hostname" → resource name
  std::unordered_map<std::string, std::string> policy_keys_;        // "ns/name" → resource name
  OwnerIndex ip_owner_;                          // workload (network, IP) → newest claim
  OwnerIndex vip_owner_;                         // service (network, VIP) → newest claim
  std::set<std::string, std::less<>> shadowed_;  // names that lost an IP or VIP to a newer claim

  // Incremental build(): the last snapshot built and what changed since. Once a batch grows past
  // an eighth of the store, names stop being recorded and the next build() starts from scratch.
  mutable std::shared_ptr<const state::StateSnapshot> base_;
  mutable std::vector<std::string> touched_;               // resource names (may repeat)
  mutable std::vector<std::string> removed_uids_;          // workloads that left (or changed uid)
  mutable std::vector<std::string> removed_service_keys_;  // services that left (or changed key)
  mutable bool policies_changed_ = false;
  mutable bool rebuild_ = true;
};

}  // namespace meshnode::xds
