#include "state/rbac.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <tuple>
#include <utility>

namespace meshnode::state {
namespace {

using Action = Authorization::Action;
using Scope = Authorization::Scope;

constexpr std::string_view kNoIdentity = "(none: no peer identity)";

// ---------------------------------------------------------------------------------------------
// The request as the matchers see it.

/// The peer identity in the two string forms policies match on: the principal is the SPIFFE id
/// without "spiffe://" ("td/ns/<ns>/sa/<sa>", as ztunnel strips it) and the namespace. Both are ""
/// without an identity. The principal is composed in a stack buffer so the data path does not
/// allocate for any Kubernetes-sized identity.
class Peer {
 public:
  explicit Peer(const AuthzRequest& request) : request_(request) {
    if (!request.source_identity) return;
    const auto& id = *request.source_identity;
    const std::array<std::string_view, 5> parts{id.trust_domain, "/ns/", id.ns, "/sa/", id.service_account};
    std::size_t size = 0;
    for (auto part : parts) size += part.size();
    char* out = buffer_.data();
    if (size > buffer_.size()) {
      heap_.resize(size);
      out = heap_.data();
    }
    std::size_t at = 0;
    for (auto part : parts) {
      std::memcpy(out + at, part.data(), part.size());
      at += part.size();
    }
    principal_ = std::string_view(out, size);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  [[nodiscard]] const AuthzRequest& request() const noexcept { return request_; }
  [[nodiscard]] bool has_identity() const noexcept { return request_.source_identity.has_value(); }
  [[nodiscard]] std::string_view principal() const noexcept { return principal_; }
  [[nodiscard]] std::string_view ns() const noexcept {
    return has_identity() ? std::string_view(request_.source_identity->ns) : std::string_view();
  }

 private:
  const AuthzRequest& request_;
  std::array<char, 640> buffer_;
  std::string heap_;
  std::string_view principal_;
};

// ---------------------------------------------------------------------------------------------
// Matching: research §4.6.

bool string_matches(const StringMatch& m, std::string_view text) {
  switch (m.kind) {
    case StringMatch::Kind::kExact:
      return text == m.value;
    case StringMatch::Kind::kPrefix:
      return text.starts_with(m.value);
    case StringMatch::Kind::kSuffix:
      return text.ends_with(m.value);
    case StringMatch::Kind::kPresence:
      return !text.empty();
  }
  return false;
}

/// The field group a match failed on; kNone = the match holds.
enum class Field : std::uint8_t {
  kNone,
  kDestinationIps,
  kSourceIps,
  kDestinationPorts,
  kServiceAccounts,
  kPrincipals,
  kNamespaces
};

struct Failure {
  Field field = Field::kNone;
  /// false: no element of the positive list held; true: negative element `index` held.
  bool negative = false;
  std::size_t index = 0;
};

template <class T, class Pred>
Failure check_group(Field field, const std::vector<T>& positive, const std::vector<T>& negative, Pred pred) {
  if (!positive.empty() && std::none_of(positive.begin(), positive.end(), pred)) return {field, false, 0};
  for (std::size_t i = 0; i < negative.size(); ++i) {
    if (pred(negative[i])) return {field, true, i};
  }
  return {};
}

/// The first field group of `m` that does not hold (ztunnel's order), or kNone.
Failure first_failure(const Match& m, const Peer& peer) {
  const auto& req = peer.request();
  const auto& id = req.source_identity;
  Failure f = check_group(Field::kDestinationIps, m.destination_ips, m.not_destination_ips,
                          [&](const base::IpNet& n) { return n.contains(req.destination.ip); });
  if (f.field != Field::kNone) return f;
  f = check_group(Field::kSourceIps, m.source_ips, m.not_source_ips,
                  [&](const base::IpNet& n) { return n.contains(req.source.ip()); });
  if (f.field != Field::kNone) return f;
  f = check_group(Field::kDestinationPorts, m.destination_ports, m.not_destination_ports,
                  [&](std::uint16_t p) { return p == req.destination.port; });
  if (f.field != Field::kNone) return f;
  // Trust domain ignored; no identity never equals.
  f = check_group(Field::kServiceAccounts, m.service_accounts, m.not_service_accounts,
                  [&](const ServiceAccountMatch& s) {
                    return id && id->ns == s.ns && id->service_account == s.service_account;
                  });
  if (f.field != Field::kNone) return f;
  // ztunnel strips "spiffe://" and fails when it is absent: no identity fails even kPresence.
  f = check_group(Field::kPrincipals, m.principals, m.not_principals, [&](const StringMatch& s) {
    return peer.has_identity() && string_matches(s, peer.principal());
  });
  if (f.field != Field::kNone) return f;
  // The namespace is "" without an identity, and is matched like any string.
  return check_group(Field::kNamespaces, m.namespaces, m.not_namespaces,
                     [&](const StringMatch& s) { return string_matches(s, peer.ns()); });
}

/// Matches are OR-ed; an all-empty match is skipped; an empty clause is true.
bool clause_matches(const Clause& clause, const Peer& peer) {
  if (clause.matches.empty()) return true;
  return std::any_of(clause.matches.begin(), clause.matches.end(), [&](const Match& m) {
    return !m.empty() && first_failure(m, peer).field == Field::kNone;
  });
}

/// Rules are OR-ed, clauses AND-ed; zero rules never match.
bool policy_matches(const Authorization& policy, const Peer& peer) {
  return std::any_of(policy.rules.begin(), policy.rules.end(), [&](const Rule& rule) {
    return std::all_of(rule.clauses.begin(), rule.clauses.end(),
                       [&](const Clause& c) { return clause_matches(c, peer); });
  });
}

// ---------------------------------------------------------------------------------------------
// Scope: research §4.6 "applicable policies".

/// Compares a policy key as if against the text `ns + "/"` (the first key of namespace `ns`
/// in key order), so the snapshot's key-sorted map can be searched without building a string.
struct NamespaceKeyStart {
  std::string_view ns;

  static int compare(std::string_view key, std::string_view ns) {
    if (int c = key.substr(0, ns.size()).compare(ns); c != 0) return c;
    if (key.size() == ns.size()) return -1;
    auto next = static_cast<unsigned char>(key[ns.size()]);
    if (next != '/') return next < '/' ? -1 : 1;
    return key.size() > ns.size() + 1 ? 1 : 0;
  }
  friend bool operator<(const std::string& key, NamespaceKeyStart start) {
    return compare(key, start.ns) < 0;
  }
  friend bool operator<(NamespaceKeyStart start, const std::string& key) {
    return compare(key, start.ns) > 0;
  }
};

/// In scope through the namespace index (so not evaluated again when also listed by the workload).
bool in_scope_by_namespace(const Authorization& policy, const Workload& workload) {
  return policy.scope == Scope::kGlobal || (policy.scope == Scope::kNamespace && policy.ns == workload.ns);
}

bool listed_before(const Workload& workload, std::size_t index) {
  const auto& keys = workload.authorization_policies;
  return std::find(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(index), keys[index]) !=
         keys.begin() + static_cast<std::ptrdiff_t>(index);
}

/// Calls fn(policy) once per policy in scope for `workload`: its namespace's policies (a key range
/// of the sorted map), then Global ones, then the keys it lists (missing keys skipped).
template <class Fn>
void for_each_applicable(const StateSnapshot& snapshot, const Workload& workload, Fn&& fn) {
  const auto& all = snapshot.policies();
  const std::string_view ns = workload.ns;
  for (auto it = all.lower_bound(NamespaceKeyStart{ns});
       it != all.end() && it->first.size() > ns.size() && it->first.starts_with(ns) &&
       it->first[ns.size()] == '/';
       ++it) {
    if (it->second.scope == Scope::kNamespace && it->second.ns == ns) fn(it->second);
  }
  for (const Authorization* policy : snapshot.global_policies()) fn(*policy);
  for (std::size_t i = 0; i < workload.authorization_policies.size(); ++i) {
    const Authorization* policy = snapshot.policy_by_key(workload.authorization_policies[i]);
    if (policy == nullptr || in_scope_by_namespace(*policy, workload) || listed_before(workload, i)) continue;
    fn(*policy);
  }
}

// ---------------------------------------------------------------------------------------------
// Decision.

/// Evaluates policies one at a time, lazily, in the order of research §4.6: nothing after a
/// matching DENY can change the outcome, so ALLOW policies are only evaluated until then.
struct Tally {
  const Authorization* deny = nullptr;
  const Authorization* allow = nullptr;
  bool any_policy = false;
  bool has_allow = false;
  bool has_dry_allow = false;
  bool dry_allow_matched = false;
  std::vector<std::string> dry_run_denies;

  void add(const Authorization& policy, const Peer& peer) {
    any_policy = true;
    if (policy.action == Action::kDeny) {
      if (policy.dry_run) {
        if (policy_matches(policy, peer)) dry_run_denies.push_back(policy.key());
      } else if (deny == nullptr && policy_matches(policy, peer)) {
        deny = &policy;
      }
    } else if (policy.dry_run) {
      has_dry_allow = true;
      if (deny == nullptr && !dry_allow_matched) dry_allow_matched = policy_matches(policy, peer);
    } else {
      has_allow = true;
      if (deny == nullptr && allow == nullptr && policy_matches(policy, peer)) allow = &policy;
    }
  }

  AuthzDecision decide() && {
    AuthzDecision d;
    d.dry_run_denies = std::move(dry_run_denies);
    if (deny != nullptr) {
      d.deciding_policy = deny->key();
      d.reason = "explicitly denied by: " + d.deciding_policy;
      return d;
    }
    d.dry_run_allow_would_deny = has_dry_allow && allow == nullptr && !dry_allow_matched;
    if (!has_allow) {
      d.allowed = true;
      d.reason = any_policy ? "no allow policies apply" : "no policies apply";
    } else if (allow != nullptr) {
      d.allowed = true;
      d.deciding_policy = allow->key();
      d.reason = "allowed by: " + d.deciding_policy;
    } else {
      d.reason = "no allow policy matched";
    }
    return d;
  }
};

// ---------------------------------------------------------------------------------------------
// Explanation (debug endpoint: allocation is fine here).

std::string render(const StringMatch& m) {
  switch (m.kind) {
    case StringMatch::Kind::kExact:
      return "exact:" + m.value;
    case StringMatch::Kind::kPrefix:
      return "prefix:" + m.value;
    case StringMatch::Kind::kSuffix:
      return "suffix:" + m.value;
    case StringMatch::Kind::kPresence:
      return "presence";
  }
  return {};
}
std::string render(const base::IpNet& n) { return n.to_string(); }
std::string render(std::uint16_t port) { return std::to_string(port); }
std::string render(const ServiceAccountMatch& s) { return s.ns + "/" + s.service_account; }

template <class T>
std::string render_list(const std::vector<T>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : ", ") + render(items[i]);
  return out + "]";
}

/// "<what> <value> not in <positive> [...]" or "<what> <value> matches <negative>[i] <item>".
template <class T>
std::string describe_group(std::string_view what, const std::string& value, std::string_view positive_name,
                           std::string_view negative_name, const std::vector<T>& positive,
                           const std::vector<T>& negative, const Failure& f) {
  std::string out = std::string(what) + " " + value;
  if (!f.negative) return out + " not in " + std::string(positive_name) + " " + render_list(positive);
  return out + " matches " + std::string(negative_name) + "[" + std::to_string(f.index) + "] " +
         render(negative[f.index]);
}

std::string describe_failure(const Match& m, const Failure& f, const Peer& peer) {
  const auto& req = peer.request();
  const std::string none(kNoIdentity);
  switch (f.field) {
    case Field::kNone:
      return "matches";
    case Field::kDestinationIps:
      return describe_group("destination ip", req.destination.ip.to_string(), "destinationIps",
                            "notDestinationIps", m.destination_ips, m.not_destination_ips, f);
    case Field::kSourceIps:
      return describe_group("source ip", req.source.ip().to_string(), "sourceIps", "notSourceIps", m.source_ips,
                            m.not_source_ips, f);
    case Field::kDestinationPorts:
      return describe_group("destination port", std::to_string(req.destination.port), "destinationPorts",
                            "notDestinationPorts", m.destination_ports, m.not_destination_ports, f);
    case Field::kServiceAccounts: {
      const auto& id = req.source_identity;
      return describe_group("service account", id ? id->ns + "/" + id->service_account : none,
                            "serviceAccounts", "notServiceAccounts", m.service_accounts,
                            m.not_service_accounts, f);
    }
    case Field::kPrincipals:
      return describe_group("principal", peer.has_identity() ? std::string(peer.principal()) : none,
                            "principals", "notPrincipals", m.principals, m.not_principals, f);
    case Field::kNamespaces:
      return describe_group("namespace", peer.has_identity() ? std::string(peer.ns()) : "\"\" " + none,
                            "namespaces", "notNamespaces", m.namespaces, m.not_namespaces, f);
  }
  return {};
}

/// Index of the first match that holds, or nullopt with `why` listing each match's failure.
std::optional<std::size_t> explain_clause(const Clause& clause, const Peer& peer, std::string& why) {
  for (std::size_t k = 0; k < clause.matches.size(); ++k) {
    const Match& m = clause.matches[k];
    Failure f = m.empty() ? Failure{} : first_failure(m, peer);
    if (!m.empty() && f.field == Field::kNone) return k;
    why += (k == 0 ? "match " : ", match ") + std::to_string(k) + ": ";
    why += m.empty() ? std::string("empty (skipped)") : describe_failure(m, f, peer);
  }
  return std::nullopt;
}

/// true and "rule i matched: ..." when the rule holds; false and "rule i clause j: ..." otherwise.
bool explain_rule(const Rule& rule, std::size_t i, const Peer& peer, std::string& out) {
  std::string head = "rule " + std::to_string(i);
  if (rule.clauses.empty()) {
    out = head + " matched (no clauses)";
    return true;
  }
  std::string used;
  for (std::size_t j = 0; j < rule.clauses.size(); ++j) {
    const Clause& clause = rule.clauses[j];
    std::string why;
    auto k = explain_clause(clause, peer, why);
    std::string clause_head = "clause " + std::to_string(j);
    if (clause.matches.empty()) {
      used += (j == 0 ? "" : ", ") + clause_head + " empty";
    } else if (k) {
      used += (j == 0 ? "" : ", ") + clause_head + " by match " + std::to_string(*k);
    } else {
      out = head + " " + clause_head + ": " + (why.empty() ? "no matches" : why);
      return false;
    }
  }
  out = head + " matched: " + used;
  return true;
}

/// {matched, detail} for an in-scope policy.
std::pair<bool, std::string> explain_policy(const Authorization& policy, const Peer& peer) {
  if (policy.rules.empty()) return {false, "no rules (never matches)"};
  std::string failures;
  for (std::size_t i = 0; i < policy.rules.size(); ++i) {
    std::string text;
    if (explain_rule(policy.rules[i], i, peer, text)) return {true, text};
    failures += (i == 0 ? "" : "; ") + text;
  }
  return {false, failures};
}

/// nullopt when `policy` is in scope for `workload`; otherwise why not.
std::optional<std::string> out_of_scope_reason(const Authorization& policy, const Workload& workload,
                                               const std::string& key) {
  const auto& listed = workload.authorization_policies;
  if (in_scope_by_namespace(policy, workload) ||
      std::find(listed.begin(), listed.end(), key) != listed.end()) {
    return std::nullopt;
  }
  if (policy.scope == Scope::kNamespace) {
    return "namespace policy of '" + policy.ns + "'; destination workload is in '" + workload.ns + "'";
  }
  return "workload-selector policy not listed in the destination workload's authorizationPolicies";
}

}  // namespace

AuthzDecision authorize(const StateSnapshot& snapshot, const AuthzRequest& request) {
  if (request.destination_workload == nullptr) {
    AuthzDecision d;
    d.reason = "destination workload not found";
    return d;
  }
  Peer peer(request);
  Tally tally;
  for_each_applicable(snapshot, *request.destination_workload,
                      [&](const Authorization& policy) { tally.add(policy, peer); });
  return std::move(tally).decide();
}

std::vector<PolicyExplanation> explain(const StateSnapshot& snapshot, const AuthzRequest& request) {
  std::vector<PolicyExplanation> out;
  const Workload* workload = request.destination_workload;
  Peer peer(request);
  for (const auto& [key, policy] : snapshot.policies()) {
    PolicyExplanation e{key, std::string(to_string(policy.action)), policy.dry_run, false, false, {}};
    auto not_in_scope = workload == nullptr ? std::optional<std::string>("destination workload not found")
                                            : out_of_scope_reason(policy, *workload, key);
    if (not_in_scope) {
      e.detail = std::move(*not_in_scope);
    } else {
      e.applies = true;
      std::tie(e.matched, e.detail) = explain_policy(policy, peer);
    }
    out.push_back(std::move(e));
  }
  if (workload == nullptr) return out;
  for (std::size_t i = 0; i < workload->authorization_policies.size(); ++i) {
    const auto& key = workload->authorization_policies[i];
    if (snapshot.policy_by_key(key) != nullptr || listed_before(*workload, i)) continue;
    out.push_back(
        {key, "", false, false, false, "listed by the destination workload but not known (skipped)"});
  }
  return out;
}

}  // namespace meshnode::state
