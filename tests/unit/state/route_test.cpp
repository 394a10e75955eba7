#include "state/route.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "unit/state/fixture.hpp"

namespace meshnode::state {
namespace {

using base::Errc;
using test::ip;
using test::service;
using test::workload;

constexpr std::string_view kWeb = "default/web.default.svc.cluster.local";
constexpr std::string_view kLegacy = "default/legacy.default.svc.cluster.local";
constexpr std::string_view kFlaky = "default/flaky.default.svc.cluster.local";
constexpr std::string_view kPrivate = "other/private.other.svc.cluster.local";

// Default network: client c; web endpoints a (cap 1, dual-stack) and b (cap 3, v4 only);
// legacy endpoint t (TCP, no own mapping); flaky endpoints u (unhealthy) and h; private
// (namespace-visible) endpoint p. Network "net2": workload o.
std::shared_ptr<const StateSnapshot> make_snapshot() {
  std::vector<Workload> w;
  w.push_back(workload("c", "default", "client", {"10.0.0.1"}));
  w.push_back(workload("a", "default", "web", {"10.0.1.1", "fd00::1:1"}));
  w.back().services[std::string(kWeb)] = {{80, 8080}};
  w.push_back(workload("b", "default", "web", {"10.0.1.2"}));
  w.back().services[std::string(kWeb)] = {{80, 8081}};
  w.back().capacity = 3;
  w.push_back(workload("t", "default", "legacy", {"10.0.2.1"}, TunnelProtocol::kNone));
  w.back().services[std::string(kLegacy)] = {};
  w.push_back(workload("u", "default", "flaky", {"10.0.3.1"}));
  w.back().services[std::string(kFlaky)] = {{80, 80}};
  w.back().healthy = false;
  w.push_back(workload("h", "default", "flaky", {"10.0.3.2"}));
  w.back().services[std::string(kFlaky)] = {{80, 80}};
  w.push_back(workload("p", "other", "private", {"10.0.4.1"}, TunnelProtocol::kNone));
  w.back().services[std::string(kPrivate)] = {{80, 80}};
  w.push_back(workload("o", "default", "remote", {"10.0.1.50"}));
  w.back().network = "net2";
  w.push_back(workload("s", "default", "sidecar", {"10.0.5.1"}));
  w.back().native_tunnel = true;  // its own Envoy serves 15008

  std::vector<Service> s;
  s.push_back(service("default", "web", {"10.96.0.1", "fd00:96::1"}, {{80, 0}, {9090, 0}}));
  s.back().subject_alt_names = {"spiffe://cluster.local/ns/default/sa/web-canary", "not-a-spiffe-id",
                                "spiffe://cluster.local/ns/default/sa/web"};
  s.push_back(service("default", "legacy", {"10.96.0.2"}, {{5432, 5433}}));
  s.push_back(service("default", "flaky", {"10.96.0.3"}, {{80, 0}}));
  s.push_back(service("default", "empty", {"10.96.0.4"}, {{80, 80}}));
  s.push_back(service("other", "private", {"10.96.0.5"}, {{80, 80}}));
  s.back().visibility = Visibility::kNamespace;
  s.push_back(service("default", "pt", {"10.96.0.6"}, {{80, 80}}));
  s.back().load_balancing.mode = LoadBalancingMode::kPassthrough;
  return StateSnapshot::build(std::move(w), std::move(s), {}).value();
}

struct Expect {
  Route::Kind kind = Route::Kind::kPassthrough;
  std::string next_hop;
  std::string hbone_target;  // "" = not set
  std::string destination;   // uid; "" = none
  std::string_view service;  // key; "" = none
  std::vector<std::string> identities;
};

struct RouteCase {
  std::string name;
  std::string orig_dst;
  std::uint64_t lb_random = 0;
  std::optional<Errc> error;  // set: select_route must fail with this code
  Expect expect;
};

const std::string kWebId = "spiffe://cluster.local/ns/default/sa/web";
const std::string kCanaryId = "spiffe://cluster.local/ns/default/sa/web-canary";

std::vector<RouteCase> route_cases() {
  using K = Route::Kind;
  return {
      {"PodIpHbone",
       "10.0.1.1:8080",
       0,
       {},
       {K::kHbone, "10.0.1.1:15008", "10.0.1.1:8080", "a", "", {kWebId}}},
      {"PodIpTcp", "10.0.2.1:5433", 0, {}, {K::kTcp, "10.0.2.1:5433", "", "t", "", {}}},
      {"PodIpNonLoopbackOwnPortAllowed",
       "10.0.1.1:15008",
       0,
       {},
       {K::kHbone, "10.0.1.1:15008", "10.0.1.1:15008", "a", "", {kWebId}}},
      {"VipEndpointOwnMappingAndSans",
       "10.96.0.1:80",
       0,
       {},
       {K::kHbone, "10.0.1.1:15008", "10.0.1.1:8080", "a", kWeb, {kWebId, kCanaryId}}},
      {"VipServicePortMapping", "10.96.0.2:5432", 0, {}, {K::kTcp, "10.0.2.1:5433", "", "t", kLegacy, {}}},
      {"WeightedPickFirstSlot",
       "10.96.0.1:80",
       4,
       {},
       {K::kHbone, "10.0.1.1:15008", "10.0.1.1:8080", "a", kWeb, {kWebId, kCanaryId}}},
      {"WeightedPickSecondEndpoint",
       "10.96.0.1:80",
       1,
       {},
       {K::kHbone, "10.0.1.2:15008", "10.0.1.2:8081", "b", kWeb, {kWebId, kCanaryId}}},
      {"WeightedPickLastSlot",
       "10.96.0.1:80",
       7,
       {},
       {K::kHbone, "10.0.1.2:15008", "10.0.1.2:8081", "b", kWeb, {kWebId, kCanaryId}}},
      {"VipPortNotMappedAnywhere", "10.96.0.1:9090", 0, Errc::kNoHealthyUpstream, {}},
      // Issue 11 defect 10: was kNoHealthyUpstream, the same words as a service without endpoints.
      {"VipPortNotAPortOfTheService", "10.96.0.1:7070", 0, Errc::kNotFound, {}},
      {"VipWithoutEndpoints", "10.96.0.4:80", 0, Errc::kNoHealthyUpstream, {}},
      {"UnhealthyEndpointSkipped",
       "10.96.0.3:80",
       0,
       {},
       {K::kHbone,
        "10.0.3.2:15008",
        "10.0.3.2:80",
        "h",
        kFlaky,
        {"spiffe://cluster.local/ns/default/sa/flaky"}}},
      {"UnhealthyEndpointSkippedOtherRandom",
       "10.96.0.3:80",
       1,
       {},
       {K::kHbone,
        "10.0.3.2:15008",
        "10.0.3.2:80",
        "h",
        kFlaky,
        {"spiffe://cluster.local/ns/default/sa/flaky"}}},
      {"UnknownIpPassthrough", "192.0.2.7:443", 0, {}, {K::kPassthrough, "192.0.2.7:443", "", "", "", {}}},
      {"NativeTunnelSidecarHbone",
       "10.0.5.1:8080",
       0,
       {},
       {K::kHbone, "10.0.5.1:15008", "10.0.5.1:8080", "s", "", {"spiffe://cluster.local/ns/default/sa/sidecar"}}},
      {"LoopbackOutboundPortRecursive", "127.0.0.1:15001", 0, Errc::kRecursiveCall, {}},
      {"LoopbackHbonePortRecursive", "127.0.0.1:15008", 0, Errc::kRecursiveCall, {}},
      {"LoopbackV6PlaintextPortRecursive", "[::1]:15006", 0, Errc::kRecursiveCall, {}},
      {"LoopbackSocksPortRecursive", "127.0.0.1:15080", 0, Errc::kRecursiveCall, {}},
      {"LoopbackOtherPortPassthrough",
       "127.0.0.1:8080",
       0,
       {},
       {K::kPassthrough, "127.0.0.1:8080", "", "", "", {}}},
      {"OtherNetworkWorkloadNotMatched",
       "10.0.1.50:80",
       0,
       {},
       {K::kPassthrough, "10.0.1.50:80", "", "", "", {}}},
      {"NamespaceVisibleServiceHidden",
       "10.96.0.5:80",
       0,
       {},
       {K::kPassthrough, "10.96.0.5:80", "", "", "", {}}},
      {"PassthroughLbMode", "10.96.0.6:80", 0, {}, {K::kPassthrough, "10.96.0.6:80", "", "", "", {}}},
      {"Ipv6VipPrefersV6Address",
       "[fd00:96::1]:80",
       0,
       {},
       {K::kHbone, "[fd00::1:1]:15008", "[fd00::1:1]:8080", "a", kWeb, {kWebId, kCanaryId}}},
      {"Ipv6VipFallsBackToV4Only",
       "[fd00:96::1]:80",
       1,
       {},
       {K::kHbone, "10.0.1.2:15008", "10.0.1.2:8081", "b", kWeb, {kWebId, kCanaryId}}},
      {"Ipv6PodIp",
       "[fd00::1:1]:8080",
       0,
       {},
       {K::kHbone, "[fd00::1:1]:15008", "[fd00::1:1]:8080", "a", "", {kWebId}}},
  };
}

void PrintTo(const RouteCase& c, std::ostream* os) { *os << c.name; }

class SelectRouteTest : public ::testing::TestWithParam<RouteCase> {};

TEST_P(SelectRouteTest, Table) {
  static const auto snapshot = make_snapshot();
  const RouteCase& c = GetParam();
  auto source = snapshot->workload_by_uid("c");
  ASSERT_NE(source, nullptr);
  auto route = select_route(*snapshot, *source, base::OrigDstAddr{base::SocketAddr::parse(c.orig_dst).value()}, c.lb_random);
  if (c.error) {
    ASSERT_FALSE(route.has_value());
    EXPECT_EQ(route.error().code, *c.error) << route.error().message();
    return;
  }
  ASSERT_TRUE(route.has_value()) << route.error().message();
  EXPECT_EQ(route->kind, c.expect.kind) << to_string(route->kind);
  EXPECT_EQ(route->next_hop.to_string(), c.expect.next_hop);
  EXPECT_EQ(route->hbone_target.addr, c.expect.hbone_target.empty()
                                          ? base::SocketAddr{}
                                          : base::SocketAddr::parse(c.expect.hbone_target).value());
  EXPECT_EQ(route->destination ? route->destination->uid : "", c.expect.destination);
  EXPECT_EQ(route->service ? route->service->key() : "", c.expect.service);
  std::vector<std::string> ids;
  for (const auto& id : route->expected_identities) ids.push_back(id.to_string());
  EXPECT_EQ(ids, c.expect.identities);
  // Early data only to a node proxy: never a sidecar's Envoy (native tunnel), nor without HBONE.
  EXPECT_EQ(route->early_data, route->kind == Route::Kind::kHbone && route->destination->native_tunnel == false);
}

INSTANTIATE_TEST_SUITE_P(Outbound, SelectRouteTest, ::testing::ValuesIn(route_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SelectRoute, ErrorsNameTheServiceAndTheLoop) {
  auto snapshot = make_snapshot();
  auto source = snapshot->workload_by_uid("c");
  auto none = select_route(*snapshot, *source, base::OrigDstAddr{base::SocketAddr::parse("10.96.0.4:80").value()}, 0);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().context,
            "no healthy upstream for service default/empty.default.svc.cluster.local port 80");
  auto port = select_route(*snapshot, *source, base::OrigDstAddr{base::SocketAddr::parse("10.96.0.1:7070").value()}, 0);
  ASSERT_FALSE(port.has_value());
  EXPECT_EQ(port.error().context, "port 7070 is not a port of service default/web.default.svc.cluster.local");
  auto loop = select_route(*snapshot, *source, base::OrigDstAddr{base::SocketAddr::parse("127.0.0.1:15001").value()}, 0);
  ASSERT_FALSE(loop.has_value());
  EXPECT_EQ(loop.error().context, "attempted recursive call to ourselves: 127.0.0.1:15001");
}

TEST(SelectRoute, WeightedPickIsDeterministicAndProportional) {
  auto snapshot = make_snapshot();
  auto source = snapshot->workload_by_uid("c");
  auto vip = base::OrigDstAddr{base::SocketAddr::parse("10.96.0.1:80").value()};
  int picked_b = 0;
  for (std::uint64_t r = 0; r < 400; ++r) {
    auto first = select_route(*snapshot, *source, vip, r).value();
    auto again = select_route(*snapshot, *source, vip, r).value();
    EXPECT_EQ(first.destination, again.destination);
    if (first.destination->uid == "b") ++picked_b;
  }
  EXPECT_EQ(picked_b, 300);  // capacity 3 of a total of 4
}

TEST(SelectRoute, AllowAllHealthPolicyUsesUnhealthyEndpoints) {
  std::vector<Workload> w{workload("u", "default", "flaky", {"10.0.3.1"})};
  w[0].healthy = false;
  w[0].services[std::string(kFlaky)] = {{80, 80}};
  std::vector<Service> s{service("default", "flaky", {"10.96.0.3"}, {{80, 0}})};
  s[0].load_balancing.health_policy = HealthPolicy::kAllowAll;
  auto snapshot = StateSnapshot::build(w, s, {}).value();
  auto route = select_route(*snapshot, workload("c", "default", "c", {}),
                            base::OrigDstAddr{base::SocketAddr::parse("10.96.0.3:80").value()}, 0);
  ASSERT_TRUE(route.has_value()) << route.error().message();
  EXPECT_EQ(route->next_hop.to_string(), "10.0.3.1:15008");
}

TEST(SelectRoute, Ipv4OnlyServiceSkipsV6OnlyEndpoint) {
  std::vector<Workload> w{workload("v6", "default", "web", {"fd00::9"})};
  w[0].services[std::string(kWeb)] = {{80, 80}};
  std::vector<Service> s{service("default", "web", {"fd00:96::1"}, {{80, 0}})};
  s[0].ip_families = IpFamilies::kIpv4Only;
  auto snapshot = StateSnapshot::build(w, s, {}).value();
  auto route = select_route(*snapshot, workload("c", "default", "c", {}),
                            base::OrigDstAddr{base::SocketAddr::parse("[fd00:96::1]:80").value()}, 0);
  ASSERT_FALSE(route.has_value());
  EXPECT_EQ(route.error().code, Errc::kNoHealthyUpstream);
}

TEST(IllegalPorts, OwnListenerPortsOnly) {
  for (std::uint16_t p : {kOutboundPort, kInboundPlaintextPort, kInboundHbonePort, kSocks5Port}) {
    EXPECT_TRUE(is_illegal_port(p)) << p;
  }
  for (std::uint16_t p : {0, 80, 15000, 15020, 15021, 15053}) EXPECT_FALSE(is_illegal_port(p)) << p;
}

}  // namespace
}  // namespace meshnode::state
