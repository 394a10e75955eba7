#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "state/authorization.hpp"
#include "state/service.hpp"
#include "state/workload.hpp"

namespace meshnode::state {

using base::Result;

/// A workload serving a service, derived from the workload's `services` map.
struct Endpoint {
  /// Never null.
  std::shared_ptr<const Workload> workload;
  /// The workload's own mappings for this service (may be empty: then the service's ports decide).
  std::vector<PortMapping> ports;
};

/// One consistent, immutable view of all workloads, services and policies, with lookup indexes.
/// Built once by build(); shared as shared_ptr<const StateSnapshot> and replaced as a whole on
/// every update (DESIGN §3). Every method is const, lock-free and safe from any thread. Pointers
/// and references it returns live as long as the snapshot.
class StateSnapshot {
  struct Token {};

 public:
  using WorkloadMap = std::map<std::string, std::shared_ptr<const Workload>, std::less<>>;
  using ServiceMap = std::map<std::string, Service, std::less<>>;
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
  [[nodiscard]] const PolicyMap& policies() const noexcept { return policies_; }
  /// Policies with Global scope, ordered by key (pointers into `policies()`).
  [[nodiscard]] std::span<const Authorization* const> global_policies() const noexcept { return global_policies_; }

 private:
  using AddressKey = std::pair<std::string, base::IpAddr>;

  [[nodiscard]] Result<void> add_workload(std::shared_ptr<const Workload> workload);
  [[nodiscard]] Result<void> add_service(Service service);
  [[nodiscard]] Result<void> add_policy(Authorization policy);
  void index_endpoints();

  WorkloadMap workloads_;
  std::map<AddressKey, std::shared_ptr<const Workload>> workloads_by_address_;
  ServiceMap services_;
  std::map<AddressKey, const Service*> services_by_vip_;
  PolicyMap policies_;
  std::vector<const Authorization*> global_policies_;
  std::map<std::string, std::vector<Endpoint>, std::less<>> endpoints_;
};

}  // namespace meshnode::state
