#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.hpp"
#include "base/spiffe.hpp"

namespace meshnode::state {

/// How a workload accepts mesh traffic. Source: istio.workload.TunnelProtocol (NONE=0, HBONE=1;
/// LEGACY_ISTIO_MTLS is rejected by every producer of this model).
enum class TunnelProtocol { kNone, kHbone };

/// "NONE" / "HBONE" (the proto enum names, used in logs and /config_dump).
[[nodiscard]] std::string_view to_string(TunnelProtocol protocol) noexcept;

/// One port of a service as served by a workload or declared by a service.
/// Source: istio.workload.Port {service_port=1, target_port=2}.
struct PortMapping {
  /// Port the client dials on the service VIP (1..65535).
  std::uint16_t service_port = 0;
  /// Port the workload listens on. 0 only in Service::ports, meaning "not declared here; use the
  /// endpoint's own mapping".
  std::uint16_t target_port = 0;

  friend bool operator==(const PortMapping&, const PortMapping&) = default;
};

/// Topology of a workload, used by locality-aware load balancing. Source: istio.workload.Locality.
struct Locality {
  std::string region;
  std::string zone;
  std::string subzone;

  friend bool operator==(const Locality&, const Locality&) = default;
};

/// A pod or VM that can send or receive mesh traffic. Source: istio.workload.Workload (research
/// §3.3). A plain value: no invariants beyond what StateSnapshot::build checks (unique `uid`,
/// unique (network, address)). Immutable once inside a snapshot (held as shared_ptr<const>).
struct Workload {
  /// Globally unique key, e.g. "Kubernetes//Pod/default/web-1". Never empty inside a snapshot.
  std::string uid;
  std::string name;
  /// Kubernetes namespace ("namespace" is a keyword).
  std::string ns;
  /// Identity component; an empty value is treated as "default" by identity().
  std::string service_account = "default";
  /// Identity component; an empty value is treated as "cluster.local" by identity().
  std::string trust_domain = "cluster.local";
  /// Kubernetes node name hosting the workload.
  std::string node;
  /// Network the addresses belong to; "" is the default network.
  std::string network;
  /// DNS name for workloads without addresses (resolution is a later feature).
  std::string hostname;
  std::string canonical_name;
  std::string canonical_revision;
  std::string workload_name;
  /// "deployment" | "cronjob" | "pod" | "job" (lower case, as ztunnel reports it).
  std::string workload_type = "deployment";
  std::string cluster_id = "Kubernetes";
  /// Workload IPs, in producer order; may mix IPv4 and IPv6; may be empty (hostname-only).
  std::vector<base::IpAddr> addresses;
  TunnelProtocol protocol = TunnelProtocol::kNone;
  /// Services this workload is an endpoint of: key "ns/hostname" → port mappings it serves.
  std::map<std::string, std::vector<PortMapping>> services;
  /// WORKLOAD_SELECTOR policies that apply to it, as keys "ns/name" (missing keys are skipped).
  std::vector<std::string> authorization_policies;
  /// false for status UNHEALTHY: skipped as a service endpoint (still reachable by pod IP).
  bool healthy = true;
  /// Load-balancing weight among the endpoints of a service (default 1).
  std::uint32_t capacity = 1;
  Locality locality;

  /// spiffe://<trust_domain>/ns/<ns>/sa/<service_account>, with the defaults above for empty
  /// components. Pure.
  [[nodiscard]] base::SpiffeId identity() const;

  friend bool operator==(const Workload&, const Workload&) = default;
};

}  // namespace meshnode::state
