#pragma once

// Builders for xDS resources in tests: real protobuf messages, packed the way istiod packs them.

#include <google/protobuf/any.pb.h>

#include <random>
#include <string>
#include <string_view>

#include "authorization.pb.h"
#include "discovery.pb.h"
#include "state/workload.hpp"
#include "workload.pb.h"
#include "xds/convert.hpp"

namespace meshnode::xds::test {

namespace discovery = envoy::service::discovery::v3;

/// Byte-level damage for the fast-path-versus-protobuf tests: `bytes` cut at a random length
/// (`truncate`), or up to three random bytes overwritten.
inline void damage(std::string& bytes, std::mt19937& rng, bool truncate) {
  if (truncate) {
    bytes.resize(rng() % (bytes.size() + 1));
    return;
  }
  for (int k = 0; k < 3 && !bytes.empty(); ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
}

/// Raw 4 bytes of an IPv4 literal "a.b.c.d".
inline std::string ip4(std::string_view text) {
  auto ip = base::IpAddr::parse(text);
  return std::string(ip->bytes());
}

/// An HBONE pod workload with one IPv4 address, uid "Kubernetes//Pod/<ns>/<name>".
inline istio::workload::Workload pod(std::string_view ns, std::string_view name, std::string_view ip,
                                     std::string_view node = "node-a") {
  istio::workload::Workload w;
  w.set_uid("Kubernetes//Pod/" + std::string(ns) + "/" + std::string(name));
  w.set_name(std::string(name));
  w.set_namespace_(std::string(ns));
  w.add_addresses(ip4(ip));
  w.set_tunnel_protocol(istio::workload::HBONE);
  w.set_service_account(std::string(name) + "-sa");
  w.set_node(std::string(node));
  return w;
}

/// A service "<name>.<ns>.svc.cluster.local" with one VIP and port 80 → 8080.
inline istio::workload::Service service(std::string_view ns, std::string_view name, std::string_view vip) {
  istio::workload::Service s;
  s.set_name(std::string(name));
  s.set_namespace_(std::string(ns));
  s.set_hostname(std::string(name) + "." + std::string(ns) + ".svc.cluster.local");
  auto* a = s.add_addresses();
  a->set_address(ip4(vip));
  auto* p = s.add_ports();
  p->set_service_port(80);
  p->set_target_port(8080);
  return s;
}

/// A namespace-scoped DENY policy on port `port`.
inline istio::security::Authorization deny_port(std::string_view ns, std::string_view name,
                                                std::uint32_t port) {
  istio::security::Authorization a;
  a.set_name(std::string(name));
  a.set_namespace_(std::string(ns));
  a.set_scope(istio::security::NAMESPACE);
  a.set_action(istio::security::DENY);
  a.add_rules()->add_clauses()->add_matches()->add_destination_ports(port);
  return a;
}

/// A workload as the local config defines it (uid "local//v1/Pod/default/<name>").
inline state::Workload local_workload(std::string_view name, std::string_view ip) {
  state::Workload w;
  w.uid = "local//v1/Pod/default/" + std::string(name);
  w.name = std::string(name);
  w.ns = "default";
  w.addresses = {*base::IpAddr::parse(ip)};
  return w;
}

/// Adds `w` to `resp` as resource `name` (default: its uid) at `version`.
inline void add(discovery::DeltaDiscoveryResponse& resp, const istio::workload::Workload& w,
                std::string version = "1", std::string name = {}) {
  istio::workload::Address address;
  *address.mutable_workload() = w;
  auto* r = resp.add_resources();
  r->set_name(name.empty() ? w.uid() : name);
  r->set_version(std::move(version));
  r->mutable_resource()->PackFrom(address);
}

/// Adds `s` to `resp` as resource "<ns>/<hostname>".
inline void add(discovery::DeltaDiscoveryResponse& resp, const istio::workload::Service& s,
                std::string version = "1") {
  istio::workload::Address address;
  *address.mutable_service() = s;
  auto* r = resp.add_resources();
  r->set_name(s.namespace_() + "/" + s.hostname());
  r->set_version(std::move(version));
  r->mutable_resource()->PackFrom(address);
}

/// Adds `a` to `resp` as resource "<ns>/<name>".
inline void add(discovery::DeltaDiscoveryResponse& resp, const istio::security::Authorization& a,
                std::string version = "1") {
  auto* r = resp.add_resources();
  r->set_name(a.namespace_() + "/" + a.name());
  r->set_version(std::move(version));
  r->mutable_resource()->PackFrom(a);
}

/// An empty response of `type_url` with `nonce`.
inline discovery::DeltaDiscoveryResponse response(std::string_view type_url, std::string nonce = "n1") {
  discovery::DeltaDiscoveryResponse resp;
  resp.set_type_url(std::string(type_url));
  resp.set_nonce(std::move(nonce));
  return resp;
}

}  // namespace meshnode::xds::test
