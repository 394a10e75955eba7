#include "state/rbac.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "unit/state/fixture.hpp"

namespace meshnode::state {
namespace {

using Action = Authorization::Action;
using Scope = Authorization::Scope;

constexpr std::string_view kClient = "spiffe://cluster.local/ns/client-ns/sa/client";
constexpr std::string_view kClientPrincipal = "cluster.local/ns/client-ns/sa/client";

// ---- policy builders -------------------------------------------------------------------------

StringMatch exact(std::string v) { return {StringMatch::Kind::kExact, std::move(v)}; }
StringMatch prefix(std::string v) { return {StringMatch::Kind::kPrefix, std::move(v)}; }
StringMatch suffix(std::string v) { return {StringMatch::Kind::kSuffix, std::move(v)}; }
StringMatch presence() { return {StringMatch::Kind::kPresence, ""}; }
base::IpNet cidr(std::string_view text) { return base::IpNet::parse(text).value(); }

/// A policy "ns/name" with the given rules (default: namespace scope).
Authorization policy(Action action, std::string_view key, std::vector<Rule> rules,
                     Scope scope = Scope::kNamespace) {
  Authorization a;
  auto slash = key.find('/');
  a.ns = std::string(key.substr(0, slash));
  a.name = std::string(key.substr(slash + 1));
  a.action = action;
  a.scope = scope;
  a.rules = std::move(rules);
  return a;
}
/// One rule, one clause, one match.
Authorization deny(std::string_view key, Match m) {
  return policy(Action::kDeny, key, {Rule{{Clause{{m}}}}});
}
Authorization allow(std::string_view key, Match m) {
  return policy(Action::kAllow, key, {Rule{{Clause{{m}}}}});
}
Authorization dry(Authorization a) {
  a.dry_run = true;
  return a;
}
Authorization scoped(Authorization a, Scope scope) {
  a.scope = scope;
  return a;
}

// ---- the destination and the request ---------------------------------------------------------

/// The local pod every case targets: server-ns/server at 10.1.0.1 and fd00::1. It lists two
/// workload-selector keys, one namespace policy of another namespace, a missing key and a duplicate.
Workload server() {
  Workload w = test::workload("server", "server-ns", "server", {"10.1.0.1", "fd00::1"});
  w.authorization_policies = {"server-ns/ws", "other-ns/listed", "server-ns/missing", "server-ns/ws"};
  return w;
}

struct Req {
  std::string src = "10.0.0.1:40000";
  std::optional<std::string> identity = std::string(kClient);
  std::string dst = "10.1.0.1:8080";
};
Req plaintext() { return Req{.identity = std::nullopt}; }
Req from(std::string src) { return Req{.src = std::move(src)}; }
Req to(std::string dst) { return Req{.dst = std::move(dst)}; }
Req as(std::string id) { return Req{.identity = std::move(id)}; }

AuthzRequest request(const Req& r, const Workload* destination) {
  AuthzRequest out;
  out.source = base::ClientAddr{base::SocketAddr::parse(r.src).value()};
  if (r.identity) out.source_identity = base::SpiffeId::parse(*r.identity).value();
  out.destination = base::SocketAddr::parse(r.dst).value();
  out.destination_workload = destination;
  return out;
}

std::shared_ptr<const StateSnapshot> snapshot_of(std::vector<Authorization> policies) {
  std::vector<Workload> workloads{server()};
  return StateSnapshot::build(std::move(workloads), {}, std::move(policies)).value();
}

// ---- the table -------------------------------------------------------------------------------

struct AuthzCase {
  std::string name;
  std::vector<Authorization> policies;
  Req req = {};
  bool allowed = false;
  /// Expected deciding policy ("" = none).
  std::string deciding = {};
  std::vector<std::string> dry_run_denies = {};
  bool dry_run_allow_would_deny = false;
  /// Checked when non-empty.
  std::string reason = {};
};

void PrintTo(const AuthzCase& c, std::ostream* os) { *os << c.name; }

constexpr std::string_view kD = "server-ns/d";
constexpr std::string_view kA = "server-ns/a";

std::vector<AuthzCase> field_cases() {
  const std::string d(kD);
  return {
      // namespaces / notNamespaces (the identity's namespace)
      {"NsExactMatches", {deny(kD, {.namespaces = {exact("client-ns")}})}, {}, false, d},
      {"NsExactMismatch", {deny(kD, {.namespaces = {exact("other")}})}, {}, true},
      {"NsPrefix", {deny(kD, {.namespaces = {prefix("client-")}})}, {}, false, d},
      {"NsSuffix", {deny(kD, {.namespaces = {suffix("-ns")}})}, {}, false, d},
      {"NsPresence", {deny(kD, {.namespaces = {presence()}})}, {}, false, d},
      {"NsPresencePlaintext", {deny(kD, {.namespaces = {presence()}})}, plaintext(), true},
      {"NsExactEmptyPlaintext", {deny(kD, {.namespaces = {exact("")}})}, plaintext(), false, d},
      {"NotNsOwnNamespace", {deny(kD, {.not_namespaces = {exact("client-ns")}})}, {}, true},
      {"NotNsOtherNamespace", {deny(kD, {.not_namespaces = {exact("other")}})}, {}, false, d},
      {"NotNsNoneOfList", {deny(kD, {.not_namespaces = {exact("a"), prefix("client")}})}, {}, true},
      {"NotNsPlaintext", {deny(kD, {.not_namespaces = {exact("client-ns")}})}, plaintext(), false, d},
      // principals / notPrincipals (SPIFFE id without "spiffe://")
      {"PrincipalExact", {deny(kD, {.principals = {exact(std::string(kClientPrincipal))}})}, {}, false, d},
      {"PrincipalWithSchemeNeverMatches",
       {deny(kD, {.principals = {exact(std::string(kClient))}})},
       {},
       true},
      {"PrincipalPrefix", {deny(kD, {.principals = {prefix("cluster.local/ns/client-ns/")}})}, {}, false, d},
      {"PrincipalSuffix", {deny(kD, {.principals = {suffix("/sa/client")}})}, {}, false, d},
      {"PrincipalSuffixMismatch", {deny(kD, {.principals = {suffix("/sa/other")}})}, {}, true},
      {"PrincipalAnyOfList", {deny(kD, {.principals = {exact("x"), suffix("/sa/client")}})}, {}, false, d},
      {"PrincipalPresence", {deny(kD, {.principals = {presence()}})}, {}, false, d},
      {"PrincipalPresencePlaintext", {deny(kD, {.principals = {presence()}})}, plaintext(), true},
      {"PrincipalPrefixEmptyPlaintext", {deny(kD, {.principals = {prefix("")}})}, plaintext(), true},
      {"NotPrincipalPresencePlaintextIsMtlsRequired",
       {deny(kD, {.not_principals = {presence()}})},
       plaintext(),
       false,
       d},
      {"NotPrincipalPresenceWithIdentity", {deny(kD, {.not_principals = {presence()}})}, {}, true},
      {"NotPrincipalExactSelf",
       {deny(kD, {.not_principals = {exact(std::string(kClientPrincipal))}})},
       {},
       true},
      {"NotPrincipalExactOther",
       {deny(kD, {.not_principals = {exact("cluster.local/ns/a/sa/b")}})},
       {},
       false,
       d},
      // serviceAccounts / notServiceAccounts (trust domain ignored)
      {"SaMatches", {deny(kD, {.service_accounts = {{"client-ns", "client"}}})}, {}, false, d},
      {"SaIgnoresTrustDomain",
       {deny(kD, {.service_accounts = {{"client-ns", "client"}}})},
       as("spiffe://other.td/ns/client-ns/sa/client"),
       false,
       d},
      {"SaOtherAccount", {deny(kD, {.service_accounts = {{"client-ns", "other"}}})}, {}, true},
      {"SaOtherNamespace", {deny(kD, {.service_accounts = {{"other", "client"}}})}, {}, true},
      {"SaPlaintext", {deny(kD, {.service_accounts = {{"client-ns", "client"}}})}, plaintext(), true},
      {"NotSaSelf", {deny(kD, {.not_service_accounts = {{"client-ns", "client"}}})}, {}, true},
      {"NotSaPlaintext",
       {deny(kD, {.not_service_accounts = {{"client-ns", "client"}}})},
       plaintext(),
       false,
       d},
      // sourceIps / notSourceIps
      {"SrcCidrV4", {deny(kD, {.source_ips = {cidr("10.0.0.0/8")}})}, {}, false, d},
      {"SrcCidrV4Outside", {deny(kD, {.source_ips = {cidr("192.168.0.0/16")}})}, {}, true},
      {"SrcCidrV6", {deny(kD, {.source_ips = {cidr("fd00:a::/32")}})}, from("[fd00:a::5]:40000"), false, d},
      {"SrcCidrV4DoesNotMatchV6",
       {deny(kD, {.source_ips = {cidr("0.0.0.0/0")}})},
       from("[fd00:a::5]:40000"),
       true},
      {"NotSrcInside", {deny(kD, {.not_source_ips = {cidr("10.0.0.0/24")}})}, {}, true},
      {"NotSrcOutside", {deny(kD, {.not_source_ips = {cidr("192.168.0.0/16")}})}, {}, false, d},
      // destinationIps / notDestinationIps
      {"DstHostV4", {deny(kD, {.destination_ips = {cidr("10.1.0.1/32")}})}, {}, false, d},
      {"DstCidrV6", {deny(kD, {.destination_ips = {cidr("fd00::/64")}})}, to("[fd00::1]:8080"), false, d},
      {"DstCidrV6Outside", {deny(kD, {.destination_ips = {cidr("fd01::/64")}})}, to("[fd00::1]:8080"), true},
      {"NotDstInside", {deny(kD, {.not_destination_ips = {cidr("10.1.0.0/16")}})}, {}, true},
      {"NotDstOutside", {deny(kD, {.not_destination_ips = {cidr("10.2.0.0/16")}})}, {}, false, d},
      // destinationPorts / notDestinationPorts
      {"PortMatches", {deny(kD, {.destination_ports = {8080}})}, {}, false, d},
      {"PortNotInList", {deny(kD, {.destination_ports = {80, 443}})}, {}, true},
      {"NotPortSelf", {deny(kD, {.not_destination_ports = {8080}})}, {}, true},
      {"NotPortOther", {deny(kD, {.not_destination_ports = {9090}})}, {}, false, d},
      // every field group of one match must hold
      {"FieldsAreAnded",
       {deny(kD, {.namespaces = {exact("client-ns")}, .destination_ports = {9090}})},
       {},
       true},
      {"PositiveAndNegativeBothHold",
       {deny(kD, {.namespaces = {prefix("client")}, .not_namespaces = {exact("client-other")}})},
       {},
       false,
       d},
  };
}

std::vector<AuthzCase> structure_cases() {
  const std::string d(kD), a(kA);
  const Match port8080{.destination_ports = {8080}};
  const Match port9090{.destination_ports = {9090}};
  const Match client_ns{.namespaces = {exact("client-ns")}};
  return {
      {"NoPolicies", {}, {}, true, "", {}, false, "no policies apply"},
      {"DenyZeroRulesIsNoop",
       {policy(Action::kDeny, kD, {})},
       {},
       true,
       "",
       {},
       false,
       "no allow policies apply"},
      {"AllowZeroRulesAllowsNothing",
       {policy(Action::kAllow, kA, {})},
       {},
       false,
       "",
       {},
       false,
       "no allow policy matched"},
      {"RuleWithoutClausesMatches", {policy(Action::kDeny, kD, {Rule{}})}, {}, false, d},
      {"ClauseWithoutMatchesMatches", {policy(Action::kDeny, kD, {Rule{{Clause{}}}})}, {}, false, d},
      {"ClauseOfOnlyEmptyMatchesIsFalse", {deny(kD, Match{})}, {}, true},
      {"EmptyMatchSkippedOthersCount",
       {policy(Action::kDeny, kD, {Rule{{Clause{{Match{}, port8080}}}}})},
       {},
       false,
       d},
      {"MatchesInClauseAreOred",
       {policy(Action::kDeny, kD, {Rule{{Clause{{port9090, client_ns}}}}})},
       {},
       false,
       d},
      {"ClausesInRuleAreAnded",
       {policy(Action::kDeny, kD, {Rule{{Clause{{client_ns}}, Clause{{port9090}}}}})},
       {},
       true},
      {"ClausesAllHold",
       {policy(Action::kDeny, kD, {Rule{{Clause{{client_ns}}, Clause{{port8080}}}}})},
       {},
       false,
       d},
      {"RulesAreOred",
       {policy(Action::kDeny, kD, {Rule{{Clause{{port9090}}}}, Rule{{Clause{{port8080}}}}})},
       {},
       false,
       d},
      // evaluation order
      {"DenyBeatsAllow",
       {allow(kA, client_ns), deny(kD, port8080)},
       {},
       false,
       d,
       {},
       false,
       "explicitly denied by: server-ns/d"},
      {"MatchingAllowAllows", {allow(kA, client_ns)}, {}, true, a, {}, false, "allowed by: server-ns/a"},
      {"AllowExistsButNoneMatch", {allow(kA, port9090)}, {}, false, "", {}, false, "no allow policy matched"},
      {"OnlyNonMatchingDenies", {deny(kD, port9090)}, {}, true, "", {}, false, "no allow policies apply"},
      {"AnyAllowOfSeveral", {allow(kA, port9090), allow("server-ns/b", port8080)}, {}, true, "server-ns/b"},
      {"FirstDenyByKeyDecides",
       {deny("server-ns/d1", port8080), deny("server-ns/d2", client_ns)},
       {},
       false,
       "server-ns/d1"},
      {"DryRunDenyDoesNotDeny", {dry(deny("server-ns/dd", port8080))}, {}, true, "", {"server-ns/dd"}},
      {"DryRunDenyNotMatching", {dry(deny("server-ns/dd", port9090))}, {}, true, "", {}},
      {"DryRunDenyReportedBesideRealDeny",
       {dry(deny("server-ns/dd", port8080)), deny(kD, client_ns)},
       {},
       false,
       d,
       {"server-ns/dd"}},
      {"DryRunDenyReportedWhenAllowed",
       {dry(deny("server-ns/dd", port8080)), allow(kA, client_ns)},
       {},
       true,
       a,
       {"server-ns/dd"}},
      {"DryRunAllowIsNotAnAllowPolicy", {dry(allow(kA, port9090))}, {}, true, "", {}, true},
      {"DryRunAllowMatching", {dry(allow(kA, port8080))}, {}, true, "", {}, false},
      {"DryRunAllowMatchingRealAllowNot",
       {dry(allow("server-ns/da", port8080)), allow(kA, port9090)},
       {},
       false,
       "",
       {},
       false,
       "no allow policy matched"},
      {"DryRunAllowIrrelevantAfterDeny",
       {dry(allow("server-ns/da", port9090)), deny(kD, port8080)},
       {},
       false,
       d},
      // scope
      {"GlobalDenyAppliesEverywhere",
       {scoped(deny("istio-system/g", port8080), Scope::kGlobal)},
       {},
       false,
       "istio-system/g"},
      {"GlobalAllowPlusNamespaceAllow",
       {scoped(allow("istio-system/g", port9090), Scope::kGlobal), allow(kA, client_ns)},
       {},
       true,
       a},
      {"NamespacePolicyOfOtherNamespace",
       {deny("other-ns/d", port8080)},
       {},
       true,
       "",
       {},
       false,
       "no policies apply"},
      {"NamespacePrefixIsNotTheNamespace",
       {deny("server/d", port8080), deny("server-ns-2/d", port8080)},
       {},
       true},
      {"WorkloadSelectorListed",
       {scoped(deny("server-ns/ws", port8080), Scope::kWorkloadSelector)},
       {},
       false,
       "server-ns/ws"},
      {"WorkloadSelectorNotListed",
       {scoped(deny("server-ns/ws2", port8080), Scope::kWorkloadSelector)},
       {},
       true},
      {"ListedKeyAppliesWhateverItsScope", {deny("other-ns/listed", port8080)}, {}, false, "other-ns/listed"},
      {"ListedDryRunCountedOnce",
       {scoped(dry(deny("server-ns/ws", port8080)), Scope::kWorkloadSelector)},
       {},
       true,
       "",
       {"server-ns/ws"}},
      {"NamespacePolicyAlsoListedCountedOnce",
       {dry(deny("other-ns/listed", port8080))},
       {},
       true,
       "",
       {"other-ns/listed"}},
  };
}

class AuthorizeTest : public ::testing::TestWithParam<AuthzCase> {};

TEST_P(AuthorizeTest, Table) {
  const AuthzCase& c = GetParam();
  auto snapshot = snapshot_of(c.policies);
  auto destination = snapshot->workload_by_uid("server");
  AuthzDecision d = authorize(*snapshot, request(c.req, destination.get()));
  EXPECT_EQ(d.allowed, c.allowed) << d.reason;
  EXPECT_EQ(d.deciding_policy, c.deciding);
  EXPECT_EQ(d.dry_run_denies, c.dry_run_denies);
  EXPECT_EQ(d.dry_run_allow_would_deny, c.dry_run_allow_would_deny);
  if (!c.reason.empty()) {
    EXPECT_EQ(d.reason, c.reason);
  }
}

INSTANTIATE_TEST_SUITE_P(Fields, AuthorizeTest, ::testing::ValuesIn(field_cases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Structure, AuthorizeTest, ::testing::ValuesIn(structure_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Authorize, UnknownDestinationIsDenied) {
  auto snapshot = snapshot_of({});
  AuthzDecision d = authorize(*snapshot, request({}, nullptr));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "destination workload not found");
}

TEST(Authorize, LongIdentityIsMatchedWhole) {
  std::string long_sa(700, 's');
  auto snapshot = snapshot_of({deny(kD, {.principals = {suffix("/sa/" + long_sa)}})});
  auto destination = snapshot->workload_by_uid("server");
  AuthzDecision d = authorize(
      *snapshot, request(as("spiffe://cluster.local/ns/client-ns/sa/" + long_sa), destination.get()));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.deciding_policy, kD);
}

TEST(Authorize, ReasonNamesTheDenyingPolicy) {
  auto snapshot = snapshot_of({deny(kD, {.destination_ports = {8080}})});
  auto destination = snapshot->workload_by_uid("server");
  EXPECT_EQ(authorize(*snapshot, request({}, destination.get())).reason, "explicitly denied by: server-ns/d");
}

// ---- explain ---------------------------------------------------------------------------------

const PolicyExplanation* find(const std::vector<PolicyExplanation>& all, std::string_view key) {
  for (const auto& e : all) {
    if (e.policy == key) return &e;
  }
  return nullptr;
}

TEST(Explain, CoversEveryPolicyAndSaysWhy) {
  auto snapshot = snapshot_of({
      deny(kD, {.principals = {exact("cluster.local/ns/a/sa/b")}}),
      policy(Action::kAllow, kA,
             {Rule{{Clause{{Match{.namespaces = {exact("client-ns")}}}},
                    Clause{{Match{}, Match{.destination_ports = {8080}}}}}}}),
      dry(deny("server-ns/dd", {.not_source_ips = {cidr("192.168.0.0/16")}})),
      deny("other-ns/d", {.destination_ports = {8080}}),
      scoped(deny("server-ns/ws2", {.destination_ports = {8080}}), Scope::kWorkloadSelector),
      policy(Action::kDeny, "server-ns/empty", {}),
  });
  auto destination = snapshot->workload_by_uid("server");
  auto all = explain(*snapshot, request({}, destination.get()));
  ASSERT_EQ(all.size(), 9u);  // six policies + three listed keys the snapshot lacks (one listed twice)

  const auto* d = find(all, kD);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->applies);
  EXPECT_FALSE(d->matched);
  EXPECT_EQ(d->action, "Deny");
  EXPECT_EQ(d->detail,
            "rule 0 clause 0: match 0: principal cluster.local/ns/client-ns/sa/client not in principals "
            "[exact:cluster.local/ns/a/sa/b]");

  const auto* a = find(all, kA);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->matched);
  EXPECT_EQ(a->detail, "rule 0 matched: clause 0 by match 0, clause 1 by match 1");

  const auto* dd = find(all, "server-ns/dd");
  ASSERT_NE(dd, nullptr);
  EXPECT_TRUE(dd->dry_run);
  EXPECT_TRUE(dd->matched);

  const auto* other = find(all, "other-ns/d");
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->applies);
  EXPECT_FALSE(other->matched);
  EXPECT_EQ(other->detail, "namespace policy of 'other-ns'; destination workload is in 'server-ns'");

  const auto* ws2 = find(all, "server-ns/ws2");
  ASSERT_NE(ws2, nullptr);
  EXPECT_FALSE(ws2->applies);
  EXPECT_NE(ws2->detail.find("not listed"), std::string::npos);

  const auto* empty = find(all, "server-ns/empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_TRUE(empty->applies);
  EXPECT_FALSE(empty->matched);
  EXPECT_EQ(empty->detail, "no rules (never matches)");

  const auto* missing = find(all, "server-ns/missing");
  ASSERT_NE(missing, nullptr);
  EXPECT_FALSE(missing->applies);
  EXPECT_EQ(missing->action, "");
}

TEST(Explain, NegativeFieldsAndPlaintext) {
  auto snapshot = snapshot_of({
      deny("server-ns/mtls", {.not_principals = {presence()}}),
      deny("server-ns/ports", {.not_destination_ports = {9090, 8080}}),
      policy(Action::kDeny, "server-ns/rules",
             {Rule{{Clause{{Match{}}}}}, Rule{{Clause{{Match{.source_ips = {cidr("192.168.0.0/16")}}}}}}}),
  });
  auto destination = snapshot->workload_by_uid("server");
  auto all = explain(*snapshot, request(plaintext(), destination.get()));

  const auto* mtls = find(all, "server-ns/mtls");
  ASSERT_NE(mtls, nullptr);
  EXPECT_TRUE(mtls->matched);
  EXPECT_EQ(mtls->detail, "rule 0 matched: clause 0 by match 0");

  const auto* ports = find(all, "server-ns/ports");
  ASSERT_NE(ports, nullptr);
  EXPECT_FALSE(ports->matched);
  EXPECT_EQ(ports->detail,
            "rule 0 clause 0: match 0: destination port 8080 matches notDestinationPorts[1] 8080");

  const auto* rules = find(all, "server-ns/rules");
  ASSERT_NE(rules, nullptr);
  EXPECT_FALSE(rules->matched);
  EXPECT_EQ(rules->detail,
            "rule 0 clause 0: match 0: empty (skipped); "
            "rule 1 clause 0: match 0: source ip 10.0.0.1 not in sourceIps [192.168.0.0/16]");
}

TEST(Explain, AgreesWithAuthorizeOnEveryTableCase) {
  for (const auto& cases : {field_cases(), structure_cases()}) {
    for (const auto& c : cases) {
      auto snapshot = snapshot_of(c.policies);
      auto destination = snapshot->workload_by_uid("server");
      auto req = request(c.req, destination.get());
      AuthzDecision d = authorize(*snapshot, req);
      auto all = explain(*snapshot, req);
      if (!d.deciding_policy.empty()) {
        const auto* e = find(all, d.deciding_policy);
        ASSERT_NE(e, nullptr) << c.name;
        EXPECT_TRUE(e->applies && e->matched) << c.name << ": " << e->detail;
      }
      for (const auto& key : d.dry_run_denies) {
        const auto* e = find(all, key);
        ASSERT_NE(e, nullptr) << c.name;
        EXPECT_TRUE(e->applies && e->matched && e->dry_run) << c.name;
      }
    }
  }
}

TEST(Explain, UnknownDestinationAppliesNothing) {
  auto snapshot = snapshot_of({deny(kD, {.destination_ports = {8080}})});
  auto all = explain(*snapshot, request({}, nullptr));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].applies);
  EXPECT_EQ(all[0].detail, "destination workload not found");
}

}  // namespace
}  // namespace meshnode::state
