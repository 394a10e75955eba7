#include "state/route.hpp"

#include <algorithm>
#include <optional>
#include <string>

namespace meshnode::state {
namespace {

using base::Errc;
using base::fail;
using base::IpAddr;

/// A destination chosen before the tunnel decision: which workload, which of its IPs, which port.
struct Upstream {
  std::shared_ptr<const Workload> workload;
  IpAddr ip;
  std::uint16_t port = 0;
  const Service* service = nullptr;
};

/// An endpoint that passed every filter, with the address and port it would be dialled on.
struct Candidate {
  const Endpoint* endpoint = nullptr;
  IpAddr ip;
  std::uint16_t port = 0;
};

// Research §4.1 step 5: the endpoint's own mapping wins, then the service's declared target.
std::optional<std::uint16_t> target_port(const Endpoint& endpoint, const Service& service,
                                         std::uint16_t service_port) {
  for (const auto& p : endpoint.ports) {
    if (p.service_port == service_port && p.target_port != 0) return p.target_port;
  }
  if (auto declared = service.target_port(service_port); declared && *declared != 0) return *declared;
  // Later: a workload with an application tunnel keeps the service port here.
  return std::nullopt;
}

bool family_allowed(IpFamilies families, const IpAddr& ip) {
  switch (families) {
    case IpFamilies::kIpv4Only:
      return ip.is_v4();
    case IpFamilies::kIpv6Only:
      return !ip.is_v4();
    case IpFamilies::kAutomatic:
    case IpFamilies::kDual:
      return true;
  }
  return true;
}

// Prefers the family the application dialled, so a v6 client keeps talking v6.
std::optional<IpAddr> pick_address(const Workload& workload, IpFamilies families, IpAddr::Family preferred) {
  std::optional<IpAddr> fallback;
  for (const auto& ip : workload.addresses) {
    if (!family_allowed(families, ip)) continue;
    if (ip.family() == preferred) return ip;
    if (!fallback) fallback = ip;
  }
  return fallback;
}

std::optional<Candidate> usable(const Endpoint& endpoint, const Service& service, const Workload& source,
                                base::SocketAddr orig_dst) {
  const Workload& w = *endpoint.workload;
  if (!w.healthy && service.load_balancing.health_policy == HealthPolicy::kOnlyHealthy) return std::nullopt;
  // Endpoints on another network are reachable only through a network gateway (later).
  if (w.network != source.network) return std::nullopt;
  auto port = target_port(endpoint, service, orig_dst.port);
  if (!port) return std::nullopt;
  // Later: a hostname-only workload is resolved by on-demand DNS here.
  auto ip = pick_address(w, service.ip_families, orig_dst.ip.family());
  if (!ip) return std::nullopt;
  return Candidate{&endpoint, *ip, *port};
}

const Candidate& weighted_pick(const std::vector<Candidate>& candidates, std::uint64_t lb_random) {
  std::uint64_t total = 0;
  for (const auto& c : candidates) total += c.endpoint->workload->capacity;
  // All weights zero: nothing to prefer, so pick uniformly rather than fail.
  if (total == 0) return candidates[lb_random % candidates.size()];
  std::uint64_t r = lb_random % total;
  for (const auto& c : candidates) {
    std::uint64_t weight = c.endpoint->workload->capacity;
    if (r < weight) return c;
    r -= weight;
  }
  return candidates.back();  // unreachable: r < total
}

Result<Upstream> pick_endpoint(const StateSnapshot& snapshot, const Service& service, const Workload& source,
                               base::SocketAddr orig_dst, std::uint64_t lb_random) {
  // A port the service does not declare is a client mistake, not an outage: say so (issue 11
  // defect 10; "no healthy upstream" sent operators looking for dead endpoints). A service
  // declaring no ports at all leaves the mapping to its endpoints.
  if (!service.ports.empty() && !service.target_port(orig_dst.port)) {
    return fail(Errc::kNotFound,
                "port " + std::to_string(orig_dst.port) + " is not a port of service " + service.key());
  }
  std::vector<Candidate> candidates;
  for (const auto& endpoint : snapshot.endpoints(service.key())) {
    if (auto c = usable(endpoint, service, source, orig_dst)) candidates.push_back(*c);
  }
  if (candidates.empty()) {
    return fail(Errc::kNoHealthyUpstream, "no healthy upstream for service " + service.key() + " port " +
                                              std::to_string(orig_dst.port));
  }
  // Later: Strict/Failover locality ranking narrows `candidates` here.
  const Candidate& chosen = weighted_pick(candidates, lb_random);
  return Upstream{chosen.endpoint->workload, chosen.ip, chosen.port, &service};
}

const Service* visible_service(const StateSnapshot& snapshot, const Workload& source, const IpAddr& ip) {
  const Service* service = snapshot.service_by_vip(source.network, ip);
  if (service && service->visibility == Visibility::kNamespace && service->ns != source.ns) return nullptr;
  return service;
}

// Research §4.1 steps 3 and 5: workload IP first, then service VIP. nullopt = not a mesh address
// (or a passthrough service): the caller passes the connection through.
Result<std::optional<Upstream>> resolve_upstream(const StateSnapshot& snapshot, const Workload& source,
                                                 base::SocketAddr orig_dst, std::uint64_t lb_random) {
  if (auto workload = snapshot.workload_by_address(source.network, orig_dst.ip)) {
    return Upstream{workload, orig_dst.ip, orig_dst.port, nullptr};
  }
  const Service* service = visible_service(snapshot, source, orig_dst.ip);
  if (service == nullptr || service->load_balancing.mode == LoadBalancingMode::kPassthrough) {
    return std::optional<Upstream>{};
  }
  // Later: a service with a waypoint routes to the waypoint here, before any endpoint pick.
  auto upstream = pick_endpoint(snapshot, *service, source, orig_dst, lb_random);
  if (!upstream) return std::unexpected(std::move(upstream.error()));
  return std::optional<Upstream>(std::move(*upstream));
}

std::vector<base::SpiffeId> expected_identities(const Workload& workload, const Service* service) {
  std::vector<base::SpiffeId> ids{workload.identity()};
  if (service == nullptr) return ids;
  for (const auto& san : service->subject_alt_names) {
    auto id = base::SpiffeId::parse(san);
    if (id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(std::move(*id));
  }
  return ids;
}

// Research §4.1 step 9.
Route direct_route(const Upstream& upstream) {
  Route route;
  route.destination = upstream.workload;
  route.service = upstream.service;
  if (upstream.workload->protocol == TunnelProtocol::kHbone) {
    route.kind = Route::Kind::kHbone;
    route.next_hop = base::NextHop{{upstream.ip, kInboundHbonePort}};
    route.hbone_target = base::HboneTarget{{upstream.ip, upstream.port}};
    route.expected_identities = expected_identities(*upstream.workload, upstream.service);
    route.early_data = !upstream.workload->native_tunnel;  // a node proxy, not a sidecar's Envoy
  } else {
    route.kind = Route::Kind::kTcp;
    route.next_hop = base::NextHop{{upstream.ip, upstream.port}};
  }
  return route;
}

}  // namespace

Result<Route> select_route(const StateSnapshot& snapshot, const Workload& source, base::OrigDstAddr orig,
                           std::uint64_t lb_random) {
  const base::SocketAddr& orig_dst = orig.addr;
  if (orig_dst.ip.is_loopback() && is_illegal_port(orig_dst.port)) {
    return fail(Errc::kRecursiveCall, "attempted recursive call to ourselves: " + orig_dst.to_string());
  }
  auto upstream = resolve_upstream(snapshot, source, orig_dst, lb_random);
  if (!upstream) return std::unexpected(std::move(upstream.error()));
  if (!*upstream) {
    Route route;
    route.kind = Route::Kind::kPassthrough;
    route.next_hop = base::NextHop{orig_dst};
    return route;
  }
  // Later: workload waypoints and cross-network (double HBONE) decisions slot in here.
  return direct_route(**upstream);
}

std::string_view to_string(Route::Kind kind) noexcept {
  switch (kind) {
    case Route::Kind::kHbone:
      return "hbone";
    case Route::Kind::kTcp:
      return "tcp";
    case Route::Kind::kPassthrough:
      return "passthrough";
  }
  return "unknown";
}

}  // namespace meshnode::state
