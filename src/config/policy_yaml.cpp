#include "config/schema.hpp"

namespace meshnode::config::detail {
namespace {

using state::StringMatch;

// ztunnel's serde spelling of the StringMatch enum: a one-key map, e.g. {Prefix: "spiffe"}.
Result<StringMatch> string_match(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.keys(at, {"Exact", "Prefix", "Suffix", "Presence"}));
  if (at.node.size() != 1) {
    return r.fail(
        at, "expected exactly one of Exact, Prefix, Suffix, Presence; got " + std::to_string(at.node.size()));
  }
  const auto entry = *at.node.begin();
  const std::string& kind = entry.first.Scalar();
  At value = at.child(entry.second, kind);
  if (kind == "Presence") {
    // A unit-like tuple variant: serde writes it as an empty sequence.
    bool empty = entry.second.IsNull() || (entry.second.IsSequence() && entry.second.size() == 0);
    if (!empty) return r.fail(value, "Presence takes no value: expected []");
    return StringMatch{StringMatch::Kind::kPresence, ""};
  }
  auto text = r.string(value);
  if (!text) return std::unexpected(std::move(text.error()));
  auto match_kind = kind == "Exact"    ? StringMatch::Kind::kExact
                    : kind == "Prefix" ? StringMatch::Kind::kPrefix
                                       : StringMatch::Kind::kSuffix;
  return StringMatch{match_kind, std::move(*text)};
}

Result<state::ServiceAccountMatch> service_account_match(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.keys(at, {"namespace", "serviceAccount"}));
  state::ServiceAccountMatch m;
  MESHNODE_CONFIG_TRY(r.required_into(at, "namespace", m.ns));
  MESHNODE_CONFIG_TRY(r.required_into(at, "serviceAccount", m.service_account));
  return m;
}

template <class F>
auto list_of(F each) {
  return [each](const Reader& r, const At& at) {
    return r.list(at, [&](const At& item) { return each(r, item); });
  };
}

Result<state::Match> match(const Reader& r, const At& at) {
  MESHNODE_CONFIG_TRY(r.keys(at, {"namespaces", "notNamespaces", "principals", "notPrincipals", "sourceIps",
                                  "notSourceIps", "destinationIps", "notDestinationIps", "destinationPorts",
                                  "notDestinationPorts", "serviceAccounts", "notServiceAccounts"}));
  state::Match m;
  auto strings = list_of(string_match);
  auto cidrs = list_of([](const Reader& rd, const At& a) { return rd.cidr(a); });
  auto ports = list_of([](const Reader& rd, const At& a) { return rd.port(a); });
  auto accounts = list_of(service_account_match);
  MESHNODE_CONFIG_TRY(r.read_into(at, "namespaces", m.namespaces, strings));
  MESHNODE_CONFIG_TRY(r.read_into(at, "notNamespaces", m.not_namespaces, strings));
  MESHNODE_CONFIG_TRY(r.read_into(at, "principals", m.principals, strings));
  MESHNODE_CONFIG_TRY(r.read_into(at, "notPrincipals", m.not_principals, strings));
  MESHNODE_CONFIG_TRY(r.read_into(at, "sourceIps", m.source_ips, cidrs));
  MESHNODE_CONFIG_TRY(r.read_into(at, "notSourceIps", m.not_source_ips, cidrs));
  MESHNODE_CONFIG_TRY(r.read_into(at, "destinationIps", m.destination_ips, cidrs));
  MESHNODE_CONFIG_TRY(r.read_into(at, "notDestinationIps", m.not_destination_ips, cidrs));
  MESHNODE_CONFIG_TRY(r.read_into(at, "destinationPorts", m.destination_ports, ports));
  MESHNODE_CONFIG_TRY(r.read_into(at, "notDestinationPorts", m.not_destination_ports, ports));
  MESHNODE_CONFIG_TRY(r.read_into(at, "serviceAccounts", m.service_accounts, accounts));
  MESHNODE_CONFIG_TRY(r.read_into(at, "notServiceAccounts", m.not_service_accounts, accounts));
  return m;
}

// rules: [[[match, ...] (clause), ...] (rule), ...]
Result<state::Rule> rule(const Reader& r, const At& at) {
  auto clauses = r.list(at, [&r](const At& clause_at) -> Result<state::Clause> {
    auto matches = r.list(clause_at, [&r](const At& match_at) { return match(r, match_at); });
    if (!matches) return std::unexpected(std::move(matches.error()));
    return state::Clause{std::move(*matches)};
  });
  if (!clauses) return std::unexpected(std::move(clauses.error()));
  return state::Rule{std::move(*clauses)};
}

}  // namespace

Result<state::Authorization> parse_policy(const Reader& r, const At& at) {
  using A = state::Authorization;
  MESHNODE_CONFIG_TRY(r.keys(at, {"name", "namespace", "scope", "action", "dryRun", "rules"}));
  A a;
  MESHNODE_CONFIG_TRY(r.required_into(at, "name", a.name));
  MESHNODE_CONFIG_TRY(r.required_into(at, "namespace", a.ns));
  auto scope_at = r.required(at, "scope");
  if (!scope_at) return std::unexpected(std::move(scope_at.error()));
  auto scope = r.choice<A::Scope>(*scope_at, {{"Global", A::Scope::kGlobal},
                                              {"Namespace", A::Scope::kNamespace},
                                              {"WorkloadSelector", A::Scope::kWorkloadSelector}});
  if (!scope) return std::unexpected(std::move(scope.error()));
  a.scope = *scope;
  auto action_at = r.required(at, "action");
  if (!action_at) return std::unexpected(std::move(action_at.error()));
  auto action = r.choice<A::Action>(*action_at, {{"Allow", A::Action::kAllow}, {"Deny", A::Action::kDeny}});
  if (!action) return std::unexpected(std::move(action.error()));
  a.action = *action;
  MESHNODE_CONFIG_TRY(r.read_into(at, "dryRun", a.dry_run, &Reader::boolean));
  MESHNODE_CONFIG_TRY(r.read_into(at, "rules", a.rules, list_of(rule)));
  return a;
}

}  // namespace meshnode::config::detail
