#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/ip.hpp"
#include "base/spiffe.hpp"
#include "state/interned.hpp"

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
  InternedString region;
  InternedString zone;
  InternedString subzone;

  friend bool operator==(const Locality&, const Locality&) = default;
};

/// The services a workload is an endpoint of: service key "ns/hostname" → the port mappings it
/// serves, sorted by key, unique keys. Reads like the `std::map` it replaces (iteration yields
/// `[key, ports]`, at(), find(), operator[]) but is one flat vector with interned keys: a pod is
/// usually in one or two services, and 100,000 pods share a few thousand keys.
class WorkloadServices {
 public:
  using value_type = std::pair<InternedString, std::vector<PortMapping>>;
  using const_iterator = std::vector<value_type>::const_iterator;
  using iterator = std::vector<value_type>::iterator;

  WorkloadServices() = default;
  /// From the config reader's map (already sorted by key).
  WorkloadServices(std::map<std::string, std::vector<PortMapping>> from);  // NOLINT(google-explicit-constructor)

  [[nodiscard]] const_iterator begin() const noexcept { return entries_.begin(); }
  [[nodiscard]] const_iterator end() const noexcept { return entries_.end(); }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
  [[nodiscard]] const_iterator find(std::string_view key) const noexcept;
  [[nodiscard]] bool contains(std::string_view key) const noexcept { return find(key) != end(); }
  /// The mappings for `key`; throws std::out_of_range when absent (as std::map::at).
  [[nodiscard]] const std::vector<PortMapping>& at(std::string_view key) const;
  /// Inserts `key` with no mappings when absent.
  std::vector<PortMapping>& operator[](std::string_view key);
  /// Inserts unless `key` is present; returns whether it inserted.
  bool emplace(InternedString key, std::vector<PortMapping> ports);
  bool emplace(std::string_view key, std::vector<PortMapping> ports) {
    return emplace(InternedString(key), std::move(ports));
  }
  bool emplace(const char* key, std::vector<PortMapping> ports) {
    return emplace(std::string_view(key), std::move(ports));
  }
  void reserve(std::size_t n) { entries_.reserve(n); }

  friend bool operator==(const WorkloadServices&, const WorkloadServices&) = default;

 private:
  [[nodiscard]] iterator lower_bound(std::string_view key) noexcept;
  std::vector<value_type> entries_;
};

/// "default", "cluster.local", "deployment", "Kubernetes": the defaults of a Workload, interned once
/// (a default-constructed Workload copies them instead of looking them up in the pool).
[[nodiscard]] const InternedString& default_service_account() noexcept;
[[nodiscard]] const InternedString& default_trust_domain() noexcept;
[[nodiscard]] const InternedString& default_workload_type() noexcept;
[[nodiscard]] const InternedString& default_cluster_id() noexcept;

/// A pod or VM that can send or receive mesh traffic. Source: istio.workload.Workload (research
/// §3.3). Fields shared by many workloads (namespace, identity, node, network, deployment and
/// revision names, locality) are InternedString (read like std::string; see there); the per-pod
/// ones (uid, name) are std::string; hostname (rare, usually empty) is interned to stay 8 bytes.
/// A plain value: no invariants beyond what StateSnapshot::build checks (unique `uid`, unique
/// (network, address)). Immutable once inside a snapshot (held as shared_ptr<const>).
struct Workload {
  /// Globally unique key, e.g. "Kubernetes//Pod/default/web-1". Never empty inside a snapshot.
  std::string uid;
  std::string name;
  /// Kubernetes namespace ("namespace" is a keyword).
  InternedString ns;
  /// Identity component; an empty value is treated as "default" by identity().
  InternedString service_account = default_service_account();
  /// Identity component; an empty value is treated as "cluster.local" by identity().
  InternedString trust_domain = default_trust_domain();
  /// Kubernetes node name hosting the workload.
  InternedString node;
  /// Network the addresses belong to; "" is the default network.
  InternedString network;
  /// DNS name for workloads without addresses (resolution is a later feature).
  InternedString hostname;
  InternedString canonical_name;
  InternedString canonical_revision;
  InternedString workload_name;
  /// "deployment" | "cronjob" | "pod" | "job" (lower case, as ztunnel reports it).
  InternedString workload_type = default_workload_type();
  InternedString cluster_id = default_cluster_id();
  /// Workload IPs, in producer order; may mix IPv4 and IPv6; may be empty (hostname-only).
  std::vector<base::IpAddr> addresses;
  TunnelProtocol protocol = TunnelProtocol::kNone;
  /// The workload serves HBONE on its own port 15008 (a sidecar's Envoy), not through a node
  /// proxy (Istio workload.proto `native_tunnel`, field 14; `nativeTunnel` in local YAML).
  bool native_tunnel = false;
  /// Services this workload is an endpoint of: key "ns/hostname" → port mappings it serves.
  WorkloadServices services;
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
