#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.hpp"
#include "state/workload.hpp"

namespace meshnode::state {

/// An address scoped to a network ("" = default network). Source: istio.workload.NetworkAddress.
struct NetworkAddress {
  std::string network;
  base::IpAddr address;

  /// "<network>/<ip>", the local-config spelling.
  [[nodiscard]] std::string to_string() const;
  friend auto operator<=>(const NetworkAddress&, const NetworkAddress&) = default;
  friend bool operator==(const NetworkAddress&, const NetworkAddress&) = default;
};

/// Locality dimensions a service may prefer when picking endpoints.
/// Source: istio.workload.LoadBalancing.Scope (REGION=1 … NETWORK=6).
enum class LoadBalancingScope { kRegion, kZone, kSubzone, kNode, kCluster, kNetwork };

/// Source: istio.workload.LoadBalancing.Mode. kStandard = UNSPECIFIED (plain weighted random).
/// kPassthrough: connections to the VIP go to the original destination, no endpoint pick.
enum class LoadBalancingMode { kStandard, kStrict, kFailover, kPassthrough };

/// Source: istio.workload.LoadBalancing.HealthPolicy. kAllowAll also uses unhealthy endpoints.
enum class HealthPolicy { kOnlyHealthy, kAllowAll };

/// Source: istio.workload.LoadBalancing.
struct LoadBalancing {
  /// Ordered preferences (first = most important); only used by kStrict / kFailover.
  std::vector<LoadBalancingScope> routing_preferences;
  LoadBalancingMode mode = LoadBalancingMode::kStandard;
  HealthPolicy health_policy = HealthPolicy::kOnlyHealthy;

  friend bool operator==(const LoadBalancing&, const LoadBalancing&) = default;
};

/// Which endpoint address families a service uses. Source: istio.workload.IPFamilies.
/// kAutomatic: any family, preferring the family of the original destination.
enum class IpFamilies { kAutomatic, kIpv4Only, kIpv6Only, kDual };

/// Source: istio.workload.Service.Visibility. kNamespace: only clients in the service's own
/// namespace resolve its VIPs.
enum class Visibility { kPublic, kNamespace };

/// A Kubernetes service (or ServiceEntry): a hostname with VIPs and ports. Its endpoints are not
/// stored here; StateSnapshot derives them from the workloads' `services` maps.
/// Source: istio.workload.Service (research §3.3). Plain value.
struct Service {
  std::string name;
  /// Kubernetes namespace.
  std::string ns;
  /// FQDN, e.g. "web.default.svc.cluster.local".
  std::string hostname;
  /// Virtual IPs per network; unique across a snapshot.
  std::vector<NetworkAddress> vips;
  /// Declared ports; target_port 0 = use the endpoint's own mapping.
  std::vector<PortMapping> ports;
  /// Extra identities a client accepts for this service's endpoints (SPIFFE URIs expected;
  /// others are ignored by route selection).
  std::vector<std::string> subject_alt_names;
  LoadBalancing load_balancing;
  IpFamilies ip_families = IpFamilies::kAutomatic;
  /// Preferred service when several share a VIP (multi-service VIPs are a later feature).
  bool canonical = false;
  Visibility visibility = Visibility::kPublic;

  /// "ns/hostname": the key workloads use in their `services` maps.
  [[nodiscard]] std::string key() const { return ns + "/" + hostname; }
  /// The target port declared for `service_port`: nullopt if the port is not declared, 0 if it is
  /// declared without a target.
  [[nodiscard]] std::optional<std::uint16_t> target_port(std::uint16_t service_port) const;

  friend bool operator==(const Service&, const Service&) = default;
};

}  // namespace meshnode::state
