#include "xds/convert.hpp"

#include <array>
#include <optional>
#include <string>

#include "authorization.pb.h"
#include "workload.pb.h"

namespace meshnode::xds {
namespace {

using base::Errc;
using base::fail;

namespace pw = istio::workload;
namespace ps = istio::security;

Result<std::uint16_t> port_number(std::uint32_t value, bool allow_zero, std::string_view what) {
  if (value > 65535 || (value == 0 && !allow_zero)) {
    return fail(Errc::kConfig, std::string(what) + " " + std::to_string(value) + " is outside " +
                                   (allow_zero ? "0" : "1") + "..65535");
  }
  return static_cast<std::uint16_t>(value);
}

Result<base::IpAddr> ip_from_bytes(const std::string& raw, std::string_view what) {
  auto ip = base::IpAddr::from_bytes(raw);
  if (!ip) {
    return fail(Errc::kConfig,
                std::string(what) + " has " + std::to_string(raw.size()) + " bytes (expected 4 or 16)");
  }
  return *ip;
}

state::InternedString workload_type(pw::WorkloadType type, state::InternedStringBatch& strings) {
  switch (type) {
    case pw::CRONJOB:
      return strings.get("cronjob");
    case pw::POD:
      return strings.get("pod");
    case pw::JOB:
      return strings.get("job");
    default:  // DEPLOYMENT and values from a newer istiod
      return state::default_workload_type();
  }
}

// Shared fields are interned through the caller's batch (one per decode thread and response).
void assign(state::InternedString& out, const std::string& in, state::InternedStringBatch& strings) {
  if (in.empty()) {
    out = state::InternedString();
  } else if (out != in) {
    out = strings.get(in);
  }
}

Result<std::vector<state::PortMapping>> workload_ports(const pw::PortList& list, std::string_view key) {
  std::vector<state::PortMapping> out;
  out.reserve(static_cast<std::size_t>(list.ports_size()));
  for (const auto& p : list.ports()) {
    auto service_port =
        port_number(p.service_port(), false, "services[\"" + std::string(key) + "\"] service_port");
    if (!service_port) return std::unexpected(std::move(service_port.error()));
    auto target = port_number(p.target_port(), true, "services[\"" + std::string(key) + "\"] target_port");
    if (!target) return std::unexpected(std::move(target.error()));
    out.push_back({*service_port, *target == 0 ? *service_port : *target});
  }
  return out;
}

Result<void> check_supported(const pw::Workload& in) {
  if (in.has_waypoint()) return fail(Errc::kConfig, "waypoint is not supported yet");
  if (in.has_network_gateway()) return fail(Errc::kConfig, "network_gateway is not supported yet");
  if (in.has_application_tunnel() && in.application_tunnel().protocol() != pw::ApplicationTunnel::NONE) {
    return fail(Errc::kConfig, "application_tunnel protocol " +
                                   std::to_string(in.application_tunnel().protocol()) +
                                   " is not supported yet");
  }
  return {};
}

Result<state::TunnelProtocol> tunnel_protocol(pw::TunnelProtocol p) {
  switch (p) {
    case pw::NONE:
      return state::TunnelProtocol::kNone;
    case pw::HBONE:
      return state::TunnelProtocol::kHbone;
    case pw::LEGACY_ISTIO_MTLS:
      return fail(Errc::kConfig, "tunnel_protocol LEGACY_ISTIO_MTLS is not supported");
    default:
      return fail(Errc::kConfig, "unknown tunnel_protocol " + std::to_string(static_cast<int>(p)));
  }
}

Result<void> workload_traffic(const pw::Workload& in, state::Workload& w, state::InternedStringBatch& strings) {
  auto protocol = tunnel_protocol(in.tunnel_protocol());
  if (!protocol) return std::unexpected(std::move(protocol.error()));
  w.protocol = *protocol;
  w.native_tunnel = in.native_tunnel();
  // HOST_NETWORK: the IP is the node's, shared by many pods; never route by it (research §3.3).
  if (in.network_mode() != pw::HOST_NETWORK) {
    w.addresses.reserve(static_cast<std::size_t>(in.addresses_size()));
    for (int i = 0; i < in.addresses_size(); ++i) {
      auto ip = ip_from_bytes(in.addresses(i), "addresses[" + std::to_string(i) + "]");
      if (!ip) return std::unexpected(std::move(ip.error()));
      w.addresses.push_back(*ip);
    }
  }
  w.services.reserve(in.services().size());
  for (const auto& [key, list] : in.services()) {
    auto slash = key.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == key.size()) {
      return fail(Errc::kConfig, "services key \"" + key + "\" is not \"<namespace>/<hostname>\"");
    }
    auto ports = workload_ports(list, key);
    if (!ports) return std::unexpected(std::move(ports.error()));
    w.services.emplace(strings.get(key), std::move(*ports));
  }
  w.authorization_policies.assign(in.authorization_policies().begin(), in.authorization_policies().end());
  w.healthy = in.status() != pw::UNHEALTHY;
  w.capacity = in.has_capacity() ? in.capacity().value() : 1;
  return {};
}

Result<state::NetworkAddress> vip(const pw::NetworkAddress& in, int index) {
  auto ip = ip_from_bytes(in.address(), "addresses[" + std::to_string(index) + "]");
  if (!ip) return std::unexpected(std::move(ip.error()));
  unsigned full = ip->is_v4() ? 32 : 128;
  if (in.has_length() && in.length() != full) {
    return fail(Errc::kConfig, "addresses[" + std::to_string(index) + "] is a CIDR VIP (/" +
                                   std::to_string(in.length()) + "), not supported yet");
  }
  return state::NetworkAddress{in.network(), *ip};
}

state::LoadBalancing load_balancing(const pw::LoadBalancing& in) {
  using S = state::LoadBalancingScope;
  using M = state::LoadBalancingMode;
  // Indexed by the wire value; UNSPECIFIED (0) and values from a newer istiod add no preference.
  static constexpr std::array<std::optional<S>, 7> kScopes = {
      std::nullopt, S::kRegion, S::kZone, S::kSubzone, S::kNode, S::kCluster, S::kNetwork};
  static constexpr std::array<M, 4> kModes = {M::kStandard, M::kStrict, M::kFailover, M::kPassthrough};
  state::LoadBalancing lb;
  for (int raw : in.routing_preference()) {
    if (raw > 0 && raw < static_cast<int>(kScopes.size())) lb.routing_preferences.push_back(*kScopes[raw]);
  }
  int mode = in.mode();
  lb.mode = mode >= 0 && mode < static_cast<int>(kModes.size()) ? kModes[mode] : M::kStandard;
  lb.health_policy = in.health_policy() == pw::LoadBalancing::ALLOW_ALL ? state::HealthPolicy::kAllowAll
                                                                        : state::HealthPolicy::kOnlyHealthy;
  return lb;
}

state::IpFamilies ip_families(pw::IPFamilies f) {
  using F = state::IpFamilies;
  static constexpr std::array kFamilies = {F::kAutomatic, F::kIpv4Only, F::kIpv6Only, F::kDual};
  auto i = static_cast<std::size_t>(f);
  return i < kFamilies.size() ? kFamilies[i] : F::kAutomatic;  // a newer istiod's value: automatic
}

Result<state::StringMatch> string_match(const ps::StringMatch& in) {
  using K = state::StringMatch::Kind;
  switch (in.match_type_case()) {
    case ps::StringMatch::kExact:
      return state::StringMatch{K::kExact, in.exact()};
    case ps::StringMatch::kPrefix:
      return state::StringMatch{K::kPrefix, in.prefix()};
    case ps::StringMatch::kSuffix:
      return state::StringMatch{K::kSuffix, in.suffix()};
    case ps::StringMatch::kPresence:
      return state::StringMatch{K::kPresence, ""};
    default:
      return fail(Errc::kConfig, "string match has no kind (exact, prefix, suffix or presence)");
  }
}

Result<base::IpNet> ip_net(const ps::Address& in) {
  auto ip = ip_from_bytes(in.address(), "address");
  if (!ip) return std::unexpected(std::move(ip.error()));
  unsigned full = ip->is_v4() ? 32 : 128;
  if (in.length() > full) {
    return fail(Errc::kConfig,
                "prefix length " + std::to_string(in.length()) + " is longer than the address");
  }
  return base::IpNet{*ip, static_cast<std::uint8_t>(in.length())};
}

// Converts one repeated field of a Match with `each`, prefixing errors with the field name.
template <class Out, class In, class F>
Result<void> convert_list(std::vector<Out>& out, const In& in, std::string_view field, F each) {
  out.reserve(static_cast<std::size_t>(in.size()));
  int index = 0;
  for (const auto& item : in) {
    auto converted = each(item);
    if (!converted) {
      return fail(Errc::kConfig,
                  std::string(field) + "[" + std::to_string(index) + "]: " + converted.error().context);
    }
    out.push_back(std::move(*converted));
    ++index;
  }
  return {};
}

Result<state::ServiceAccountMatch> account(const ps::ServiceAccountMatch& in) {
  return state::ServiceAccountMatch{in.namespace_(), in.serviceaccount()};
}

Result<std::uint16_t> match_port(std::uint32_t p) { return port_number(p, false, "port"); }

#define MESHNODE_XDS_TRY(expr)                                     \
  do {                                                             \
    if (auto r_ = (expr); !r_) return std::unexpected(r_.error()); \
  } while (0)

Result<state::Match> match(const ps::Match& in) {
  state::Match m;
  MESHNODE_XDS_TRY(convert_list(m.namespaces, in.namespaces(), "namespaces", string_match));
  MESHNODE_XDS_TRY(convert_list(m.not_namespaces, in.not_namespaces(), "not_namespaces", string_match));
  MESHNODE_XDS_TRY(convert_list(m.principals, in.principals(), "principals", string_match));
  MESHNODE_XDS_TRY(convert_list(m.not_principals, in.not_principals(), "not_principals", string_match));
  MESHNODE_XDS_TRY(convert_list(m.source_ips, in.source_ips(), "source_ips", ip_net));
  MESHNODE_XDS_TRY(convert_list(m.not_source_ips, in.not_source_ips(), "not_source_ips", ip_net));
  MESHNODE_XDS_TRY(convert_list(m.destination_ips, in.destination_ips(), "destination_ips", ip_net));
  MESHNODE_XDS_TRY(
      convert_list(m.not_destination_ips, in.not_destination_ips(), "not_destination_ips", ip_net));
  MESHNODE_XDS_TRY(
      convert_list(m.destination_ports, in.destination_ports(), "destination_ports", match_port));
  MESHNODE_XDS_TRY(
      convert_list(m.not_destination_ports, in.not_destination_ports(), "not_destination_ports", match_port));
  MESHNODE_XDS_TRY(convert_list(m.service_accounts, in.service_accounts(), "service_accounts", account));
  MESHNODE_XDS_TRY(
      convert_list(m.not_service_accounts, in.not_service_accounts(), "not_service_accounts", account));
  return m;
}

Result<state::Rule> rule(const ps::Rule& in) {
  state::Rule r;
  auto clause = [](const ps::Clause& c) -> Result<state::Clause> {
    state::Clause out;
    MESHNODE_XDS_TRY(convert_list(out.matches, c.matches(), "matches", match));
    return out;
  };
  MESHNODE_XDS_TRY(convert_list(r.clauses, in.clauses(), "clauses", clause));
  return r;
}

}  // namespace

Result<state::Workload> to_workload(const pw::Workload& in) {
  state::InternedStringBatch strings;
  return to_workload(in, strings);
}

Result<state::Workload> to_workload(const pw::Workload& in, state::InternedStringBatch& strings) {
  if (in.uid().empty()) return fail(Errc::kConfig, "workload has an empty uid");
  MESHNODE_XDS_TRY(check_supported(in));
  state::Workload w;
  w.uid = in.uid();
  w.name = in.name();
  assign(w.ns, in.namespace_(), strings);
  // Empty identity fields keep the defaults the Workload starts with.
  if (!in.service_account().empty()) assign(w.service_account, in.service_account(), strings);
  if (!in.trust_domain().empty()) assign(w.trust_domain, in.trust_domain(), strings);
  if (!in.cluster_id().empty()) assign(w.cluster_id, in.cluster_id(), strings);
  assign(w.node, in.node(), strings);
  assign(w.network, in.network(), strings);
  assign(w.hostname, in.hostname(), strings);
  assign(w.canonical_name, in.canonical_name(), strings);
  assign(w.canonical_revision, in.canonical_revision(), strings);
  assign(w.workload_name, in.workload_name(), strings);
  w.workload_type = workload_type(in.workload_type(), strings);
  if (in.has_locality()) {
    assign(w.locality.region, in.locality().region(), strings);
    assign(w.locality.zone, in.locality().zone(), strings);
    assign(w.locality.subzone, in.locality().subzone(), strings);
  }
  MESHNODE_XDS_TRY(workload_traffic(in, w, strings));
  return w;
}

Result<state::Service> to_service(const pw::Service& in) {
  if (in.namespace_().empty() || in.hostname().empty()) {
    return fail(Errc::kConfig, "service needs a namespace and a hostname");
  }
  if (in.has_waypoint() || in.weighted_waypoints_size() > 0) {
    return fail(Errc::kConfig, "service waypoints are not supported yet");
  }
  state::Service s;
  s.name = in.name();
  s.ns = in.namespace_();
  s.hostname = in.hostname();
  s.vips.reserve(static_cast<std::size_t>(in.addresses_size()));
  for (int i = 0; i < in.addresses_size(); ++i) {
    auto v = vip(in.addresses(i), i);
    if (!v) return std::unexpected(std::move(v.error()));
    s.vips.push_back(std::move(*v));
  }
  for (const auto& p : in.ports()) {
    auto service_port = port_number(p.service_port(), false, "ports service_port");
    if (!service_port) return std::unexpected(std::move(service_port.error()));
    auto target = port_number(p.target_port(), true, "ports target_port");
    if (!target) return std::unexpected(std::move(target.error()));
    s.ports.push_back({*service_port, *target});
  }
  s.subject_alt_names.assign(in.subject_alt_names().begin(), in.subject_alt_names().end());
  if (in.has_load_balancing()) s.load_balancing = load_balancing(in.load_balancing());
  s.ip_families = ip_families(in.ip_families());
  s.canonical = in.canonical();
  s.visibility =
      in.visibility() == pw::Service::NAMESPACE ? state::Visibility::kNamespace : state::Visibility::kPublic;
  return s;
}

Result<state::Authorization> to_authorization(const ps::Authorization& in) {
  using A = state::Authorization;
  if (in.name().empty() || in.namespace_().empty()) {
    return fail(Errc::kConfig, "authorization needs a name and a namespace");
  }
  A a;
  a.name = in.name();
  a.ns = in.namespace_();
  // Indexed by the wire value. An unknown scope or action is rejected, never guessed: a wrong guess
  // either enforces a policy where it does not apply or drops a DENY.
  static constexpr std::array kScopes = {A::Scope::kGlobal, A::Scope::kNamespace,
                                         A::Scope::kWorkloadSelector};
  static constexpr std::array kActions = {A::Action::kAllow, A::Action::kDeny};
  auto scope = static_cast<std::size_t>(in.scope());
  if (scope >= kScopes.size()) return fail(Errc::kConfig, "unknown scope " + std::to_string(in.scope()));
  auto action = static_cast<std::size_t>(in.action());
  if (action >= kActions.size()) return fail(Errc::kConfig, "unknown action " + std::to_string(in.action()));
  a.scope = kScopes[scope];
  a.action = kActions[action];
  a.dry_run = in.dry_run();
  MESHNODE_XDS_TRY(convert_list(a.rules, in.rules(), "rules", rule));
  return a;
}

}  // namespace meshnode::xds
