#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "state/authorization.hpp"
#include "state/cow_map.hpp"
#include "state/interned.hpp"
#include "state/service.hpp"
#include "state/workload.hpp"

namespace meshnode::state {

using base::Result;

/// A workload serving a service, derived from the workload's `services` map.
struct Endpoint {
  /// Never null.
  std::shared_ptr<const Workload> workload;
  /// The workload's own mappings for this service (may be empty: then the service's ports decide).
  /// Points into `workload->services`, kept alive by `workload`.
  std::span<const PortMapping> ports;
};

/// What changed between one snapshot and the next; see StateSnapshot::apply().
struct StateDelta {
  /// Workloads added or replaced, matched by uid; uids unique within the delta.
  std::vector<std::shared_ptr<const Workload>> workloads;
  /// Uids to remove. Absent uids are ignored; a uid also in `workloads` is replaced instead.
  std::vector<std::string> removed_workloads;
  /// Services added or replaced, matched by key() ("ns/hostname"); keys unique within the delta.
  std::vector<Service> services;
  /// Service keys to remove (absent keys ignored; a key also in `services` is replaced instead).
  std::vector<std::string> removed_services;
  /// When set, the complete new policy set (policies are few and re-indexed as a whole); when
  /// unset the policies of the base snapshot are shared unchanged.
  std::optional<std::vector<Authorization>> policies;

  [[nodiscard]] bool empty() const noexcept {
    return workloads.empty() && removed_workloads.empty() && services.empty() && removed_services.empty() &&
           !policies;
  }
};

/// One consistent, immutable view of all workloads, services and policies, with lookup indexes.
/// Built by build() or derived from a previous snapshot by apply(), and shared as
/// shared_ptr<const StateSnapshot>; readers always see a complete snapshot (DESIGN §3). Every
/// method is const, lock-free and safe from any thread. Pointers, references and spans it returns
/// live as long as the snapshot.
///
/// Indexes are copy-on-write chunked maps (CowMap): a snapshot derived by apply() shares every
/// chunk the delta does not touch with its base, so a one-pod delta costs a few chunks, not a
/// rebuild of 100,000 workloads (issue #12).
class StateSnapshot {
  struct Token {};
  struct ViewLess {
    using is_transparent = void;
    static std::string_view view(std::string_view s) noexcept { return s; }
    static std::string_view view(const InternedString& s) noexcept { return s.view(); }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
      return view(a) < view(b);
    }
  };

 public:
  /// (uid, workload) sorted by uid; the key views the workload's own uid.
  using WorkloadMap = CowMap<std::string_view, std::shared_ptr<const Workload>, ViewLess, 256>;
  /// (key "ns/hostname", service) sorted by key.
  using ServiceMap = CowMap<InternedString, Service, ViewLess, 64>;
  using PolicyMap = std::map<std::string, Authorization, std::less<>>;

  /// Indexes the inputs. Errc::kConfig, naming both offenders, for: an empty workload uid; a
  /// duplicate workload uid; two workloads with the same (network, IP); a duplicate service key
  /// ("ns/hostname"); two services with the same (network, VIP); a duplicate policy key. A workload
  /// may list a service key that no Service declares (its endpoints are still indexed).
  [[nodiscard]] static Result<std::shared_ptr<const StateSnapshot>> build(
      std::vector<Workload> workloads, std::vector<Service> services, std::vector<Authorization> policies);
  /// As build(), for workloads that are already shared: the xDS cache keeps its converted
  /// workloads across snapshots, so a new snapshot shares them instead of copying 100,000 values.
  /// Same errors as build(); a null workload is Errc::kInvalidArgument.
  [[nodiscard]] static Result<std::shared_ptr<const StateSnapshot>> build(
      std::vector<std::shared_ptr<const Workload>> workloads, std::vector<Service> services,
      std::vector<Authorization> policies);
  /// A snapshot with nothing in it (the state before the first config arrives).
  [[nodiscard]] static std::shared_ptr<const StateSnapshot> empty();

  /// A new snapshot: this one with `delta` applied; this one is unchanged. Shares every index
  /// chunk the delta does not touch, so the cost is proportional to the delta (plus the chunk
  /// lists: ~1 pointer per 128-256 entries). The result equals build() over the resulting set.
  /// Errors as build(), where "duplicate"/"both have" also covers a clash with an entry of this
  /// snapshot that the delta leaves in place; on error nothing is published.
  [[nodiscard]] Result<std::shared_ptr<const StateSnapshot>> apply(StateDelta delta) const;

  explicit StateSnapshot(Token) {}
  StateSnapshot(const StateSnapshot&) = delete;
  StateSnapshot& operator=(const StateSnapshot&) = delete;

  /// nullptr if absent.
  [[nodiscard]] std::shared_ptr<const Workload> workload_by_uid(std::string_view uid) const;
  /// The workload owning `ip` on `network`; nullptr if absent.
  [[nodiscard]] std::shared_ptr<const Workload> workload_by_address(std::string_view network,
                                                                    const base::IpAddr& ip) const;
  /// By "ns/hostname"; nullptr if absent.
  [[nodiscard]] const Service* service_by_key(std::string_view key) const;
  /// The service owning VIP `ip` on `network`; nullptr if absent.
  [[nodiscard]] const Service* service_by_vip(std::string_view network, const base::IpAddr& ip) const;
  /// By "ns/name"; nullptr if absent.
  [[nodiscard]] const Authorization* policy_by_key(std::string_view key) const;
  /// Endpoints of service key "ns/hostname", sorted by workload uid; empty if none.
  [[nodiscard]] std::span<const Endpoint> endpoints(std::string_view service_key) const;
  /// Policies with scope kNamespace in namespace `ns`, or with scope kGlobal when `ns` is "",
  /// sorted by key (research §4.6 `by_namespace`).
  [[nodiscard]] std::vector<const Authorization*> policies_in_namespace(std::string_view ns) const;

  /// All workloads keyed and sorted by uid (for /config_dump).
  [[nodiscard]] const WorkloadMap& workloads() const noexcept { return workloads_; }
  /// All services keyed and sorted by "ns/hostname".
  [[nodiscard]] const ServiceMap& services() const noexcept { return services_; }
  /// All policies keyed and sorted by "ns/name".
  [[nodiscard]] const PolicyMap& policies() const noexcept { return policies_->map; }
  /// Policies with Global scope, ordered by key (pointers into `policies()`).
  [[nodiscard]] std::span<const Authorization* const> global_policies() const noexcept {
    return policies_->global;
  }

 private:
  /// (IP, network): the key of the address and VIP indexes, sorted by IP then network.
  struct AddressKey {
    base::IpAddr ip;
    InternedString network;
  };
  struct AddressLookup {
    base::IpAddr ip;
    std::string_view network;
  };
  struct AddressLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
      if (a.ip != b.ip) return a.ip < b.ip;
      return std::string_view(a.network) < std::string_view(b.network);
    }
  };
  using AddressMap = CowMap<AddressKey, std::shared_ptr<const Workload>, AddressLess, 256>;
  using VipMap = CowMap<AddressKey, InternedString, AddressLess, 128>;  // → service key
  using EndpointMap = CowMap<InternedString, std::shared_ptr<const std::vector<Endpoint>>, ViewLess, 128>;
  struct PolicyIndex {
    PolicyMap map;
    std::vector<const Authorization*> global;  // into map
  };

  [[nodiscard]] Result<void> apply_workloads(std::vector<std::shared_ptr<const Workload>> upserts,
                                             std::vector<std::string> removed);
  [[nodiscard]] Result<void> apply_addresses(const std::vector<std::shared_ptr<const Workload>>& olds,
                                             const std::vector<std::shared_ptr<const Workload>>& upserts);
  // `upserts` in any order; rank[i] is the uid-order position of upserts[i] (empty: they are
  // sorted by uid).
  void apply_endpoints(const std::vector<std::shared_ptr<const Workload>>& olds,
                       const std::vector<std::shared_ptr<const Workload>>& upserts,
                       std::span<const std::uint32_t> rank);
  [[nodiscard]] Result<void> apply_services(std::vector<Service> upserts, std::vector<std::string> removed);
  [[nodiscard]] Result<void> index_policies(std::vector<Authorization> policies);

  WorkloadMap workloads_;
  AddressMap workloads_by_address_;
  ServiceMap services_;
  VipMap services_by_vip_;
  EndpointMap endpoints_;
  std::shared_ptr<const PolicyIndex> policies_ = std::make_shared<const PolicyIndex>();
};

}  // namespace meshnode::state
