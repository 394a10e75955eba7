#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/address_roles.hpp"
#include "base/ip.hpp"
#include "base/spiffe.hpp"
#include "state/authorization.hpp"
#include "state/snapshot.hpp"
#include "state/workload.hpp"

namespace meshnode::state {

/// The facts about one inbound connection that L4 authorization looks at.
/// Source: ztunnel rbac::Connection (research §4.6).
struct AuthzRequest {
  /// TCP peer address of the connection (the real peer IP, also on the plaintext path).
  base::ClientAddr source;
  /// Verified peer identity; nullopt for inbound plaintext (15006), which has none.
  std::optional<base::SpiffeId> source_identity;
  /// Destination pod IP and target (container) port.
  base::SocketAddr destination;
  /// The local destination pod; decides which policies are in scope. Must outlive the call.
  /// nullptr = unknown destination, which is always denied (ztunnel: "destination workload not found").
  const Workload* destination_workload = nullptr;
};

/// The outcome of authorize().
struct AuthzDecision {
  bool allowed = false;
  /// Key "ns/name" of the policy that decided (the matching DENY, or the first matching ALLOW);
  /// empty when no single policy decided (no allow policies, none matched, unknown destination).
  std::string deciding_policy;
  /// For logs: "explicitly denied by: ns/name" | "allowed by: ns/name" | "no allow policy matched" |
  /// "no allow policies apply" (only DENY/dry-run policies in scope) | "no policies apply" |
  /// "destination workload not found".
  std::string reason;
  /// Keys of in-scope dry-run DENY policies that match (would have denied), in evaluation order.
  /// Never changes `allowed`.
  std::vector<std::string> dry_run_denies;
  /// true when dry-run ALLOW policies are in scope, no DENY matched and no ALLOW policy (real or
  /// dry-run) matched: enforcing the dry-run ALLOW policies would deny (research §4.6 step 3).
  /// Never changes `allowed`.
  bool dry_run_allow_would_deny = false;
};

/// Decides whether an inbound connection may reach its destination workload.
/// In scope: Namespace-scope policies of the destination's namespace, Global-scope policies (any
/// namespace: they are root-namespace policies), and policies the destination workload lists in
/// `authorization_policies` (by key, whatever their scope; missing keys are skipped; a policy in
/// scope twice is evaluated once). Evaluation order: dry-run DENY (collected only) → any matching
/// DENY rejects → no real ALLOW policies: allow → a matching ALLOW allows → otherwise reject.
/// Pure: no I/O, no logging; reads only `snapshot` and `request`. Allocates only the strings it
/// returns. Any thread.
/// Source: ztunnel RBAC semantics, research §4.6.
[[nodiscard]] AuthzDecision authorize(const StateSnapshot& snapshot, const AuthzRequest& request);

/// One policy's part in a decision, for /debug/authz.
struct PolicyExplanation {
  /// Key "ns/name".
  std::string policy;
  /// "Allow" | "Deny"; empty for a key the workload lists but the snapshot lacks.
  std::string action;
  bool dry_run = false;
  /// Whether the policy is in scope for the destination workload.
  bool applies = false;
  /// Whether it matches the request; false when !applies (then it was not evaluated).
  bool matched = false;
  /// Human text: the scope reason when !applies; otherwise which rule matched (with the match used
  /// in each clause) or, per rule, the first clause that failed and why each of its matches failed,
  /// e.g. "rule 0 clause 1: match 0: principal td/ns/a/sa/b not in [exact:td/ns/a/sa/c]".
  std::string detail;
};

/// Explains authorize() policy by policy: one entry per policy in the snapshot, sorted by key, then
/// one entry per key the destination workload lists that the snapshot lacks. Allocates freely
/// (debug endpoint, not the data path). Pure; any thread. Source: ztunnel RBAC semantics, research §4.6.
[[nodiscard]] std::vector<PolicyExplanation> explain(const StateSnapshot& snapshot,
                                                     const AuthzRequest& request);

}  // namespace meshnode::state
