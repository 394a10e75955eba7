#include "config/local_config.hpp"

#include <gtest/gtest.h>

#include <string>

#include "state/snapshot.hpp"

namespace meshnode::config {
namespace {

using base::Errc;
using state::Authorization;
using state::StringMatch;

// The error context for `yaml` parsed as "test.yaml" (or "parsed" when it unexpectedly parses).
std::string error_of(std::string_view yaml) {
  auto parsed = parse_local_config(yaml, "test.yaml");
  if (parsed) return "parsed";
  EXPECT_EQ(parsed.error().code, Errc::kConfig);
  return parsed.error().context;
}

constexpr std::string_view kFull = R"(workloads:
- uid: cluster1//v1/Pod/default/a
  name: a
  namespace: default
  serviceAccount: sa-a
  workloadIps: ["10.0.0.1", "fd00::1"]
  protocol: HBONE
  node: node-1
  network: net1
  trustDomain: ""
  hostname: a.example
  canonicalName: app-a
  canonicalRevision: v2
  workloadName: a-deploy
  workloadType: job
  clusterId: cluster1
  status: Unhealthy
  capacity: 7
  locality: {region: r1, zone: z1, subzone: s1}
  authorizationPolicies: ["default/allow-a"]
  networkMode: Standard
  nativeTunnel: true
  applicationTunnel: {protocol: NONE, port: 15088}
  services:
    "default/web.example": {80: 8080, 443: 8443}
    "default/empty.example":
- name: b
  namespace: other
  workloadIps: []
services:
- name: web
  namespace: default
  hostname: web.example
  vips: ["net1/10.96.0.1", "/fd00:96::1"]
  ports: {80: 0, 443: 8443}
  subjectAltNames: ["spiffe://td/ns/default/sa/web"]
  canonical: true
  visibility: Namespace
  ipFamilies: IPv6
  loadBalancer: {routingPreferences: [Network, Zone], mode: Failover, healthPolicy: AllowAll}
policies:
- name: allow-a
  namespace: default
  scope: WorkloadSelector
  action: Deny
  dryRun: true
  rules:
  - - - namespaces: [{Exact: default}, {Prefix: kube-}, {Suffix: -system}, {Presence: []}]
        notNamespaces: [{Exact: evil}]
        principals: [{Prefix: cluster.local/ns/default/}]
        notPrincipals: [{Suffix: /sa/bad}]
        sourceIps: ["10.0.0.0/8", "fd00::/64"]
        notSourceIps: ["10.1.0.0/16"]
        destinationIps: ["10.96.0.1"]
        notDestinationIps: ["192.168.0.0/16"]
        destinationPorts: [80, 443]
        notDestinationPorts: [22]
        serviceAccounts: [{namespace: default, serviceAccount: web}]
        notServiceAccounts: [{namespace: default, serviceAccount: bad}]
    - []
- name: global
  namespace: istio-system
  scope: Global
  action: Allow
)";

TEST(LocalConfig, FullFileMapsEveryField) {
  auto parsed = parse_local_config(kFull, "full.yaml");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  ASSERT_EQ(parsed->workloads.size(), 2u);
  const state::Workload& a = parsed->workloads[0];
  EXPECT_EQ(a.uid, "cluster1//v1/Pod/default/a");
  EXPECT_EQ(a.identity().to_string(), "spiffe://cluster.local/ns/default/sa/sa-a");  // "" trust domain
  ASSERT_EQ(a.addresses.size(), 2u);
  EXPECT_EQ(a.addresses[1].to_string(), "fd00::1");
  EXPECT_EQ(a.protocol, state::TunnelProtocol::kHbone);
  EXPECT_TRUE(a.native_tunnel);
  EXPECT_FALSE(parsed->workloads[1].native_tunnel);
  EXPECT_EQ(a.network, "net1");
  EXPECT_EQ(a.hostname, "a.example");
  EXPECT_EQ(a.canonical_revision, "v2");
  EXPECT_EQ(a.workload_type, "job");
  EXPECT_EQ(a.cluster_id, "cluster1");
  EXPECT_FALSE(a.healthy);
  EXPECT_EQ(a.capacity, 7u);
  EXPECT_EQ(a.locality, (state::Locality{"r1", "z1", "s1"}));
  EXPECT_EQ(a.authorization_policies, std::vector<std::string>{"default/allow-a"});
  EXPECT_EQ(a.services.at("default/web.example"), (std::vector<state::PortMapping>{{80, 8080}, {443, 8443}}));
  EXPECT_TRUE(a.services.at("default/empty.example").empty());

  const state::Workload& b = parsed->workloads[1];
  EXPECT_EQ(b.uid, "Kubernetes//v1/Pod/other/b");  // derived
  EXPECT_EQ(b.identity().to_string(), "spiffe://cluster.local/ns/other/sa/default");
  EXPECT_EQ(b.protocol, state::TunnelProtocol::kNone);
  EXPECT_TRUE(b.healthy);
  EXPECT_EQ(b.capacity, 1u);

  ASSERT_EQ(parsed->services.size(), 1u);
  const state::Service& web = parsed->services[0];
  EXPECT_EQ(web.key(), "default/web.example");
  EXPECT_EQ(web.vips[0].to_string(), "net1/10.96.0.1");
  EXPECT_EQ(web.vips[1].to_string(), "/fd00:96::1");
  EXPECT_EQ(web.target_port(80), 0);
  EXPECT_EQ(web.target_port(443), 8443);
  EXPECT_TRUE(web.canonical);
  EXPECT_EQ(web.visibility, state::Visibility::kNamespace);
  EXPECT_EQ(web.ip_families, state::IpFamilies::kIpv6Only);
  EXPECT_EQ(web.load_balancing.mode, state::LoadBalancingMode::kFailover);
  EXPECT_EQ(web.load_balancing.health_policy, state::HealthPolicy::kAllowAll);
  EXPECT_EQ(web.load_balancing.routing_preferences,
            (std::vector{state::LoadBalancingScope::kNetwork, state::LoadBalancingScope::kZone}));

  ASSERT_EQ(parsed->policies.size(), 2u);
  const Authorization& p = parsed->policies[0];
  EXPECT_EQ(p.key(), "default/allow-a");
  EXPECT_EQ(p.scope, Authorization::Scope::kWorkloadSelector);
  EXPECT_EQ(p.action, Authorization::Action::kDeny);
  EXPECT_TRUE(p.dry_run);
  ASSERT_EQ(p.rules.size(), 1u);
  ASSERT_EQ(p.rules[0].clauses.size(), 2u);
  EXPECT_TRUE(p.rules[0].clauses[1].matches.empty());
  const state::Match& m = p.rules[0].clauses[0].matches.at(0);
  EXPECT_EQ(m.namespaces, (std::vector<StringMatch>{{StringMatch::Kind::kExact, "default"},
                                                    {StringMatch::Kind::kPrefix, "kube-"},
                                                    {StringMatch::Kind::kSuffix, "-system"},
                                                    {StringMatch::Kind::kPresence, ""}}));
  EXPECT_EQ(m.not_principals, (std::vector<StringMatch>{{StringMatch::Kind::kSuffix, "/sa/bad"}}));
  EXPECT_EQ(m.source_ips[1].to_string(), "fd00::/64");
  EXPECT_EQ(m.not_destination_ips[0].to_string(), "192.168.0.0/16");
  EXPECT_EQ(m.destination_ports, (std::vector<std::uint16_t>{80, 443}));
  EXPECT_EQ(m.not_destination_ports, (std::vector<std::uint16_t>{22}));
  EXPECT_EQ(m.service_accounts, (std::vector<state::ServiceAccountMatch>{{"default", "web"}}));
  EXPECT_EQ(m.not_service_accounts[0].service_account, "bad");
  EXPECT_EQ(parsed->policies[1].scope, Authorization::Scope::kGlobal);
  EXPECT_FALSE(parsed->policies[1].dry_run);
  EXPECT_TRUE(parsed->policies[1].rules.empty());

  EXPECT_TRUE(state::StateSnapshot::build(parsed->workloads, parsed->services, parsed->policies).has_value());
}

TEST(LocalConfig, ExampleFileLoadsAndBuilds) {
  auto loaded = load_local_config(MESHNODE_EXAMPLES_DIR "/local-config.yaml");
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message();
  EXPECT_EQ(loaded->workloads.size(), 3u);
  EXPECT_EQ(loaded->services.size(), 1u);
  ASSERT_EQ(loaded->policies.size(), 1u);
  EXPECT_EQ(loaded->policies[0].rules.at(0).clauses.size(), 2u);
  EXPECT_EQ(loaded->policies[0].rules[0].clauses[0].matches.size(), 2u);
  auto snapshot = state::StateSnapshot::build(loaded->workloads, loaded->services, loaded->policies);
  ASSERT_TRUE(snapshot.has_value()) << snapshot.error().message();
  EXPECT_EQ((*snapshot)->endpoints("default/web.default.svc.cluster.local").size(), 2u);
}

TEST(LocalConfig, MissingFileIsAnIoError) {
  auto loaded = load_local_config("/nonexistent/meshnode.yaml");
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, Errc::kIo);
}

TEST(LocalConfig, EmptyInputsAreAnEmptyConfig) {
  for (std::string_view text :
       {"", "\n", "# only a comment\n", "---\n", "~\n", "workloads:\npolicies: []\n"}) {
    auto parsed = parse_local_config(text, "empty.yaml");
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
    EXPECT_TRUE(parsed->workloads.empty() && parsed->services.empty() && parsed->policies.empty());
  }
}

TEST(LocalConfig, SnapshotLevelErrorsComeFromBuild) {
  auto parsed = parse_local_config(R"(workloads:
- {uid: x, namespace: a, workloadIps: ["10.0.0.1"]}
- {uid: y, namespace: a, workloadIps: ["10.0.0.1"]}
)",
                                   "dup.yaml");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  auto built = state::StateSnapshot::build(parsed->workloads, {}, {});
  ASSERT_FALSE(built.has_value());
  EXPECT_EQ(built.error().context, "workloads 'x' and 'y' both have address /10.0.0.1");
}

struct BadCase {
  std::string name;
  std::string yaml;
  std::string error;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadLocalConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadLocalConfig, ExactError) { EXPECT_EQ(error_of(GetParam().yaml), GetParam().error); }

const std::string kW = "workloads:\n- name: w\n  namespace: default\n";  // first item, line 2..3

std::vector<BadCase> bad_cases() {
  return {
      {"MalformedYaml", "workloads: [\n",
       "test.yaml:2:1: (root): malformed YAML: end of sequence flow not found"},
      {"RootNotAMap", "- name: old-style\n", "test.yaml:1:1: (root): expected a map, got a sequence"},
      {"UnknownTopLevelKey", "workloads: []\nendpoints: []\n",
       "test.yaml:2:1: (root): unknown key \"endpoints\""},
      {"UnknownWorkloadKey", kW + "  workloadIps: []\n  workloadIp: 10.0.0.1\n",
       "test.yaml:5:3: workloads[0]: unknown key \"workloadIp\""},
      {"DuplicateKey", kW + "  workloadIps: []\n  name: again\n",
       "test.yaml:5:3: workloads[0]: duplicate key \"name\""},
      {"MissingNamespace", "workloads:\n- name: w\n  workloadIps: []\n",
       "test.yaml:2:3: workloads[0]: missing required key \"namespace\""},
      {"MissingWorkloadIps", kW, "test.yaml:2:3: workloads[0]: missing required key \"workloadIps\""},
      {"WorkloadsNotASequence", "workloads: {a: 1}\n",
       "test.yaml:1:12: workloads: expected a sequence, got a map"},
      {"IpsNotASequence", kW + "  workloadIps: 10.0.0.1\n",
       "test.yaml:4:16: workloads[0].workloadIps: expected a sequence, got a scalar \"10.0.0.1\""},
      {"NameNotAString", "workloads:\n- name: [w]\n  namespace: default\n  workloadIps: []\n",
       "test.yaml:2:9: workloads[0].name: expected a string, got a sequence"},
      {"BadIp", kW + "  workloadIps: [\"10.0.0.1\", \"10.0.0.300\"]\n",
       "test.yaml:4:29: workloads[0].workloadIps[1]: invalid IP address \"10.0.0.300\""},
      {"BadProtocol", kW + "  workloadIps: []\n  protocol: UDP\n",
       "test.yaml:5:13: workloads[0].protocol: invalid value \"UDP\": expected one of HBONE, TCP"},
      {"BadStatus", kW + "  workloadIps: []\n  status: healthy\n",
       "test.yaml:5:11: workloads[0].status: invalid value \"healthy\": expected one of Healthy, Unhealthy"},
      {"BadWorkloadType", kW + "  workloadIps: []\n  workloadType: Deployment\n",
       "test.yaml:5:17: workloads[0].workloadType: invalid value \"Deployment\": expected one of deployment, "
       "cronjob, pod, job"},
      {"NegativeCapacity", kW + "  workloadIps: []\n  capacity: -1\n",
       "test.yaml:5:13: workloads[0].capacity: invalid number \"-1\": expected an integer in 0..4294967295"},
      {"TargetPortOutOfRange", kW + "  workloadIps: []\n  services: {\"default/web\": {80: 70000}}\n",
       "test.yaml:5:34: workloads[0].services[\"default/web\"][80]: invalid port \"70000\": expected an "
       "integer "
       "in 1..65535"},
      {"ServicePortZero", kW + "  workloadIps: []\n  services: {\"default/web\": {0: 80}}\n",
       "test.yaml:5:30: workloads[0].services[\"default/web\"]: invalid port \"0\": expected an integer in "
       "1..65535"},
      {"BadServiceKey", kW + "  workloadIps: []\n  services: {web: {80: 80}}\n",
       "test.yaml:5:14: workloads[0].services: invalid service key \"web\": expected "
       "\"<namespace>/<hostname>\""},
      {"WaypointNotSupported", kW + "  workloadIps: []\n  waypoint: {destination: /10.0.0.9}\n",
       "test.yaml:5:3: workloads[0]: key \"waypoint\" is not supported yet"},
      {"HostNetworkNotSupported", kW + "  workloadIps: []\n  networkMode: HostNetwork\n",
       "test.yaml:5:16: workloads[0].networkMode: networkMode \"HostNetwork\" is not supported yet"},
      {"BadVip", "services:\n- {name: s, namespace: n, hostname: h, vips: [\"10.96.0.1\"]}\n",
       "test.yaml:2:47: services[0].vips[0]: invalid VIP \"10.96.0.1\": expected \"<network>/<ip>\""},
      {"MissingHostname", "services:\n- {name: s, namespace: n}\n",
       "test.yaml:2:3: services[0]: missing required key \"hostname\""},
      {"BadIpFamilies", "services:\n- {name: s, namespace: n, hostname: h, ipFamilies: Ipv4}\n",
       "test.yaml:2:52: services[0].ipFamilies: invalid value \"Ipv4\": expected one of Dual, IPv4, IPv6"},
      {"MissingScope", "policies:\n- {name: p, namespace: n, action: Allow}\n",
       "test.yaml:2:3: policies[0]: missing required key \"scope\""},
      {"BadAction", "policies:\n- {name: p, namespace: n, scope: Global, action: ALLOW}\n",
       "test.yaml:2:50: policies[0].action: invalid value \"ALLOW\": expected one of Allow, Deny"},
      {"BadDryRun", "policies:\n- {name: p, namespace: n, scope: Global, action: Allow, dryRun: maybe}\n",
       "test.yaml:2:65: policies[0].dryRun: invalid boolean \"maybe\": expected true or false"},
      {"BadCidr",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [[[{sourceIps: [\"10.0.0.0/33\"]}]]]}\n",
       "test.yaml:3:27: policies[0].rules[0][0][0].sourceIps[0]: invalid CIDR \"10.0.0.0/33\""},
      {"BadDestinationPort",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [[[{destinationPorts: [0]}]]]}\n",
       "test.yaml:3:34: policies[0].rules[0][0][0].destinationPorts[0]: invalid port \"0\": expected an "
       "integer "
       "in 1..65535"},
      {"BadStringMatchKind",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [[[{principals: [{Regex: \".*\"}]}]]]}\n",
       "test.yaml:3:29: policies[0].rules[0][0][0].principals[0]: unknown key \"Regex\""},
      {"StringMatchTwoKinds",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [[[{namespaces: [{Exact: a, Prefix: b}]}]]]}\n",
       "test.yaml:3:28: policies[0].rules[0][0][0].namespaces[0]: expected exactly one of Exact, Prefix, "
       "Suffix, Presence; got 2"},
      {"PresenceWithValue",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [[[{namespaces: [{Presence: x}]}]]]}\n",
       "test.yaml:3:39: policies[0].rules[0][0][0].namespaces[0].Presence: Presence takes no value: expected "
       "[]"},
      {"ServiceAccountMatchMissingAccount",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [[[{serviceAccounts: [{namespace: a}]}]]]}\n",
       "test.yaml:3:33: policies[0].rules[0][0][0].serviceAccounts[0]: missing required key "
       "\"serviceAccount\""},
      {"RuleNotNested",
       "policies:\n- {name: p, namespace: n, scope: Global, action: Allow,\n"
       "   rules: [{destinationPorts: [80]}]}\n",
       "test.yaml:3:12: policies[0].rules[0]: expected a sequence, got a map"},
      // Found by tests/fuzz/config_yaml_fuzz (corpus/config_yaml/regress_identity_slash).
      {"ServiceAccountMakesAnotherIdentity", kW + "  serviceAccount: web/sa/admin\n  workloadIps: []\n",
       "test.yaml:2:3: workloads[0]: namespace, serviceAccount and trustDomain do not form one SPIFFE identity: "
       "invalid SPIFFE identity 'spiffe://cluster.local/ns/default/sa/web/sa/admin': expected <trust domain>/ns/"
       "<namespace>/sa/<service account>"},
      {"EmptyNamespace", "workloads:\n- name: w\n  namespace: \"\"\n  workloadIps: []\n",
       "test.yaml:2:3: workloads[0]: namespace, serviceAccount and trustDomain do not form one SPIFFE identity: "
       "invalid SPIFFE identity 'spiffe://cluster.local/ns//sa/default': empty path segment"},
      // yaml-cpp 0.7's LoadAll never returned on these (and grew without bound): found by
      // tests/fuzz/config_yaml_fuzz (corpus/config_yaml/regress_leading_comma).
      {"LeadingComma", ",\x86", "test.yaml:1:1: (root): malformed YAML: unexpected text"},
      {"CommaAfterADocumentEnd", "workloads: []\n...\n,\n",
       "test.yaml:3:1: (root): malformed YAML: unexpected text"},
      {"CommentThenComma", "# local config\n,\n", "test.yaml:2:1: (root): malformed YAML: unexpected text"},
      {"TwoDocuments", "workloads: []\n---\nservices: []\n",
       "test.yaml:3:1: (root): expected one YAML document, got 2"},
  };
}

INSTANTIATE_TEST_SUITE_P(LocalConfig, BadLocalConfig, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace meshnode::config

namespace meshnode::config {
namespace {

TEST(LocalConfig, HostileInputNeverThrows) {
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  for (std::string_view text :
       {std::string_view("workloads: [*undefined]"), std::string_view("{[a]: 1}"),
        std::string_view("workloads:\n- {? [x] : 1}\n"), std::string_view("workloads: !!binary aGVsbG8="),
        std::string_view("\t\tworkloads: ["), std::string_view("workloads: &a [*a]"),
        std::string_view("workloads:\n- namespace: n\n  workloadIps: []\n  capacity: 99999999999999999999\n"),
        std::string_view("services:\n- {name: s, namespace: n, hostname: h, ports: {80: 0, 80: 1}}\n"),
        std::string_view("services:\n- {name: s, namespace: n, hostname: h, ports: [80]}\n"),
        std::string_view("policies:\n- {name: p, namespace: n, scope: Global, action: Allow, rules: [[[{namespaces: "
                         "[{}]}]]]}\n"),
        std::string_view("\xff\xfe\x00garbage", 11), std::string_view(deep)}) {
    Result<LocalConfig> parsed = LocalConfig{};
    EXPECT_NO_THROW(parsed = parse_local_config(text, "hostile.yaml")) << text.substr(0, 60);
    if (!parsed) {
      EXPECT_TRUE(parsed.error().code == base::Errc::kConfig) << parsed.error().message();
      EXPECT_TRUE(parsed.error().context.starts_with("hostile.yaml:")) << parsed.error().context;
    }
  }
}

}  // namespace
}  // namespace meshnode::config
