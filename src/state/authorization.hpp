#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.hpp"

namespace meshnode::state {

/// A string predicate. Source: istio.security.StringMatch (oneof exact=1, prefix=2, suffix=3,
/// presence=4). Local YAML spelling: {Exact: x} | {Prefix: x} | {Suffix: x} | {Presence: []}.
struct StringMatch {
  enum class Kind { kExact, kPrefix, kSuffix, kPresence };
  Kind kind = Kind::kExact;
  /// The operand; empty for kPresence.
  std::string value;

  friend bool operator==(const StringMatch&, const StringMatch&) = default;
};

/// Matches a peer identity's namespace and service account (trust domain ignored).
/// Source: istio.security.ServiceAccountMatch.
struct ServiceAccountMatch {
  std::string ns;
  std::string service_account;

  friend bool operator==(const ServiceAccountMatch&, const ServiceAccountMatch&) = default;
};

/// One set of conditions; every non-empty field group must hold (positive list: any-of; negative
/// list: none-of). Source: istio.security.Match (research §4.6). Ports are destination
/// (target/container) ports.
struct Match {
  std::vector<StringMatch> namespaces;
  std::vector<StringMatch> not_namespaces;
  /// Matched against the peer identity without the "spiffe://" prefix.
  std::vector<StringMatch> principals;
  std::vector<StringMatch> not_principals;
  std::vector<base::IpNet> source_ips;
  std::vector<base::IpNet> not_source_ips;
  std::vector<base::IpNet> destination_ips;
  std::vector<base::IpNet> not_destination_ips;
  std::vector<std::uint16_t> destination_ports;
  std::vector<std::uint16_t> not_destination_ports;
  std::vector<ServiceAccountMatch> service_accounts;
  std::vector<ServiceAccountMatch> not_service_accounts;

  /// true when every list is empty (such a match is skipped by evaluation).
  [[nodiscard]] bool empty() const noexcept;
  friend bool operator==(const Match&, const Match&) = default;
};

/// Matches are OR-ed; an empty clause is true. Source: istio.security.Clause.
struct Clause {
  std::vector<Match> matches;
  friend bool operator==(const Clause&, const Clause&) = default;
};

/// Clauses are AND-ed. Source: istio.security.Rule.
struct Rule {
  std::vector<Clause> clauses;
  friend bool operator==(const Rule&, const Rule&) = default;
};

/// An L4 authorization policy. Source: istio.security.Authorization (research §3.3; semantics
/// §4.6 — evaluation is not part of this model). Plain value.
struct Authorization {
  /// Which workloads it applies to: kGlobal = every workload (root-namespace policy), kNamespace =
  /// workloads in `ns`, kWorkloadSelector = workloads listing key() in authorization_policies.
  enum class Scope { kGlobal, kNamespace, kWorkloadSelector };
  enum class Action { kAllow, kDeny };

  std::string name;
  std::string ns;
  Scope scope = Scope::kGlobal;
  Action action = Action::kAllow;
  /// Evaluated and logged only, never enforced.
  bool dry_run = false;
  /// Rules are OR-ed; zero rules never match.
  std::vector<Rule> rules;

  /// "ns/name", the key workloads reference.
  [[nodiscard]] std::string key() const { return ns + "/" + name; }
  friend bool operator==(const Authorization&, const Authorization&) = default;
};

/// "Global" / "Namespace" / "WorkloadSelector" (local-config spelling).
[[nodiscard]] std::string_view to_string(Authorization::Scope scope) noexcept;
/// "Allow" / "Deny" (local-config spelling).
[[nodiscard]] std::string_view to_string(Authorization::Action action) noexcept;

}  // namespace meshnode::state
