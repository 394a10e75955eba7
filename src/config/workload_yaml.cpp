#include "base/spiffe.hpp"
#include "config/schema.hpp"

namespace meshnode::config::detail {
namespace {

using state::Workload;

// Rejects a "ns/name"-style key that lacks either half.
Result<std::string> namespaced_key(const Reader& r, const At& at, std::string_view what) {
  auto text = r.string(at);
  if (!text) return text;
  auto slash = text->find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text->size()) {
    return r.fail(at, "invalid " + std::string(what) + " \"" + *text + "\": expected \"<namespace>/<" +
                          (what == "service key" ? "hostname" : "name") + ">\"");
  }
  return text;
}

Result<std::map<std::string, std::vector<state::PortMapping>>> workload_services(const Reader& r,
                                                                                 const At& at) {
  MESHNODE_CONFIG_TRY(r.expect_map(at));
  std::map<std::string, std::vector<state::PortMapping>> out;
  for (const auto& entry : at.node) {
    auto key = namespaced_key(r, At{entry.first, at.path}, "service key");
    if (!key) return std::unexpected(std::move(key.error()));
    if (out.contains(*key)) return r.fail(entry.first.Mark(), at.path, "duplicate key \"" + *key + "\"");
    At ports = at.item(entry.second, "\"" + *key + "\"");
    std::vector<state::PortMapping> mappings;
    if (!entry.second.IsNull()) {
      auto parsed = r.port_map(ports, /*allow_zero_target=*/false);
      if (!parsed) return std::unexpected(std::move(parsed.error()));
      mappings = std::move(*parsed);
    }
    out.emplace(std::move(*key), std::move(mappings));
  }
  return out;
}

Result<state::Locality> locality(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.keys(at, {"region", "zone", "subzone"}));
  state::Locality l;
  MESHNODE_CONFIG_TRY(r.read_into(at, "region", l.region, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "zone", l.zone, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "subzone", l.subzone, &Reader::string));
  return l;
}

// Keys we can validate but whose behaviour is not implemented: accepted only in the harmless form.
Result<void> check_unimplemented(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.unsupported(at, "waypoint"));
  MESHNODE_CONFIG_TRY(r.unsupported(at, "networkGateway"));
  if (auto mode = r.field(at, "networkMode")) {
    auto value = r.choice<bool>(*mode, {{"Standard", true}, {"HostNetwork", false}});
    if (!value) return std::unexpected(std::move(value.error()));
    if (!*value) return r.fail(*mode, "networkMode \"HostNetwork\" is not supported yet");
  }
  if (auto tunnel = r.field(at, "applicationTunnel")) {
    MESHNODE_CONFIG_TRY(r.keys(*tunnel, {"protocol", "port"}));
    bool proxy = false;
    std::uint16_t port = 0;
    MESHNODE_CONFIG_TRY(r.read_into(*tunnel, "protocol", proxy, [](const Reader& rd, const At& a) {
      return rd.choice<bool>(a, {{"NONE", false}, {"PROXY", true}});
    }));
    MESHNODE_CONFIG_TRY(
        r.read_into(*tunnel, "port", port, [](const Reader& rd, const At& a) { return rd.port(a); }));
    if (proxy) return r.fail(*tunnel, "applicationTunnel protocol \"PROXY\" is not supported yet");
  }
  return {};
}

Result<void> identity_fields(const Reader& r, const At& at, Workload& w) {
  MESHNODE_CONFIG_TRY(r.read_into(at, "uid", w.uid, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "name", w.name, &Reader::string));
  std::string ns;  // w.ns is interned: read it as a string first
  MESHNODE_CONFIG_TRY(r.required_into(at, "namespace", ns));
  w.ns = ns;
  MESHNODE_CONFIG_TRY(r.read_into(at, "serviceAccount", w.service_account, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "trustDomain", w.trust_domain, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "clusterId", w.cluster_id, &Reader::string));
  if (w.service_account.empty()) w.service_account = "default";
  if (w.trust_domain.empty()) w.trust_domain = "cluster.local";
  if (w.cluster_id.empty()) w.cluster_id = "Kubernetes";
  // These three make the workload's SPIFFE identity (its certificate, its policy principal): refuse
  // values that do not make exactly that identity, such as a '/' in the service account.
  const base::SpiffeId id = w.identity();
  if (auto parsed = base::SpiffeId::parse(id.to_string()); !parsed || *parsed != id) {
    return r.fail(at, "namespace, serviceAccount and trustDomain do not form one SPIFFE identity: " +
                          (parsed ? id.to_string() : parsed.error().context));
  }
  if (w.uid.empty()) {
    if (w.name.empty()) return r.fail(at, "missing required key \"uid\" (or \"name\" to derive it from)");
    w.uid = w.cluster_id + "//v1/Pod/" + w.ns + "/" + w.name;
  }
  return {};
}

Result<void> descriptive_fields(const Reader& r, const At& at, Workload& w) {
  MESHNODE_CONFIG_TRY(r.read_into(at, "node", w.node, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "network", w.network, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "hostname", w.hostname, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "canonicalName", w.canonical_name, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "canonicalRevision", w.canonical_revision, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "workloadName", w.workload_name, &Reader::string));
  MESHNODE_CONFIG_TRY(r.read_into(at, "workloadType", w.workload_type, [](const Reader& rd, const At& a) {
    return rd.choice<std::string>(
        a, {{"deployment", "deployment"}, {"cronjob", "cronjob"}, {"pod", "pod"}, {"job", "job"}});
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "locality", w.locality, locality));
  return {};
}

Result<void> traffic_fields(const Reader& r, const At& at, Workload& w) {
  auto ips = r.required(at, "workloadIps");
  if (!ips) return std::unexpected(std::move(ips.error()));
  auto addresses = r.list(*ips, [&r](const At& item) { return r.ip(item); });
  if (!addresses) return std::unexpected(std::move(addresses.error()));
  w.addresses = std::move(*addresses);
  MESHNODE_CONFIG_TRY(r.read_into(at, "protocol", w.protocol, [](const Reader& rd, const At& a) {
    return rd.choice<state::TunnelProtocol>(
        a, {{"HBONE", state::TunnelProtocol::kHbone}, {"TCP", state::TunnelProtocol::kNone}});
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "nativeTunnel", w.native_tunnel, &Reader::boolean));
  MESHNODE_CONFIG_TRY(r.read_into(at, "status", w.healthy, [](const Reader& rd, const At& a) {
    return rd.choice<bool>(a, {{"Healthy", true}, {"Unhealthy", false}});
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "capacity", w.capacity, &Reader::u32));
  MESHNODE_CONFIG_TRY(r.read_into(at, "services", w.services, workload_services));
  MESHNODE_CONFIG_TRY(
      r.read_into(at, "authorizationPolicies", w.authorization_policies, [](const Reader& rd, const At& a) {
        return rd.list(a, [&rd](const At& item) { return namespaced_key(rd, item, "policy key"); });
      }));
  return {};
}

Result<state::NetworkAddress> vip(const Reader& r, const At& at) {
  auto text = r.string(at);
  if (!text) return std::unexpected(std::move(text.error()));
  auto slash = text->find('/');
  if (slash == std::string::npos)
    return r.fail(at, "invalid VIP \"" + *text + "\": expected \"<network>/<ip>\"");
  auto ip = base::IpAddr::parse(std::string_view(*text).substr(slash + 1));
  if (!ip) return r.fail(at, "invalid VIP \"" + *text + "\": invalid IP address");
  return state::NetworkAddress{text->substr(0, slash), *ip};
}

Result<state::LoadBalancing> load_balancer(const Reader& r, const At& at) {
  using state::LoadBalancingScope;
  MESHNODE_CONFIG_TRY(r.keys(at, {"routingPreferences", "mode", "healthPolicy"}));
  state::LoadBalancing lb;
  MESHNODE_CONFIG_TRY(
      r.read_into(at, "routingPreferences", lb.routing_preferences, [](const Reader& rd, const At& a) {
        return rd.list(a, [&rd](const At& item) {
          return rd.choice<LoadBalancingScope>(item, {{"Region", LoadBalancingScope::kRegion},
                                                      {"Zone", LoadBalancingScope::kZone},
                                                      {"Subzone", LoadBalancingScope::kSubzone},
                                                      {"Node", LoadBalancingScope::kNode},
                                                      {"Cluster", LoadBalancingScope::kCluster},
                                                      {"Network", LoadBalancingScope::kNetwork}});
        });
      }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "mode", lb.mode, [](const Reader& rd, const At& a) {
    using M = state::LoadBalancingMode;
    return rd.choice<M>(a, {{"Standard", M::kStandard},
                            {"Strict", M::kStrict},
                            {"Failover", M::kFailover},
                            {"Passthrough", M::kPassthrough}});
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "healthPolicy", lb.health_policy, [](const Reader& rd, const At& a) {
    using H = state::HealthPolicy;
    return rd.choice<H>(a, {{"OnlyHealthy", H::kOnlyHealthy}, {"AllowAll", H::kAllowAll}});
  }));
  return lb;
}

Result<void> service_options(const Reader& r, const At& at, state::Service& s) {
  MESHNODE_CONFIG_TRY(r.read_into(at, "subjectAltNames", s.subject_alt_names, &Reader::strings));
  MESHNODE_CONFIG_TRY(r.read_into(at, "canonical", s.canonical, &Reader::boolean));
  MESHNODE_CONFIG_TRY(r.read_into(at, "visibility", s.visibility, [](const Reader& rd, const At& a) {
    using V = state::Visibility;
    return rd.choice<V>(a, {{"Public", V::kPublic}, {"Namespace", V::kNamespace}});
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "ipFamilies", s.ip_families, [](const Reader& rd, const At& a) {
    using F = state::IpFamilies;
    return rd.choice<F>(a, {{"Dual", F::kDual}, {"IPv4", F::kIpv4Only}, {"IPv6", F::kIpv6Only}});
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "loadBalancer", s.load_balancing, load_balancer));
  return {};
}

}  // namespace

Result<Workload> parse_workload(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.keys(at, {"uid",
                                  "name",
                                  "namespace",
                                  "serviceAccount",
                                  "workloadIps",
                                  "protocol",
                                  "node",
                                  "network",
                                  "trustDomain",
                                  "hostname",
                                  "canonicalName",
                                  "canonicalRevision",
                                  "workloadName",
                                  "workloadType",
                                  "clusterId",
                                  "status",
                                  "capacity",
                                  "locality",
                                  "authorizationPolicies",
                                  "services",
                                  "networkMode",
                                  "nativeTunnel",
                                  "waypoint",
                                  "networkGateway",
                                  "applicationTunnel"}));
  MESHNODE_CONFIG_TRY(check_unimplemented(r, at));
  Workload w;
  MESHNODE_CONFIG_TRY(identity_fields(r, at, w));
  MESHNODE_CONFIG_TRY(descriptive_fields(r, at, w));
  MESHNODE_CONFIG_TRY(traffic_fields(r, at, w));
  return w;
}

Result<state::Service> parse_service(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.keys(
      at, {"name", "namespace", "hostname", "vips", "ports", "subjectAltNames", "canonical", "visibility",
           "ipFamilies", "loadBalancer", "cidrVips", "waypoint", "weightedWaypoints", "endpoints"}));
  for (std::string_view key : {"cidrVips", "waypoint", "weightedWaypoints", "endpoints"}) {
    MESHNODE_CONFIG_TRY(r.unsupported(at, key));
  }
  state::Service s;
  MESHNODE_CONFIG_TRY(r.required_into(at, "name", s.name));
  MESHNODE_CONFIG_TRY(r.required_into(at, "namespace", s.ns));
  MESHNODE_CONFIG_TRY(r.required_into(at, "hostname", s.hostname));
  MESHNODE_CONFIG_TRY(r.read_into(at, "vips", s.vips, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return vip(rd, item); });
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "ports", s.ports, [](const Reader& rd, const At& a) {
    return rd.port_map(a, /*allow_zero_target=*/true);
  }));
  MESHNODE_CONFIG_TRY(service_options(r, at, s));
  return s;
}

}  // namespace meshnode::config::detail
