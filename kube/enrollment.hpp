#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kube/types.hpp"

namespace meshnode::kube {

// Names Istio's ambient mode reads and writes (research/ztunnel-feature-map.md §3.2).
inline constexpr std::string_view kDataplaneModeLabel = "istio.io/dataplane-mode";
inline constexpr std::string_view kDataplaneModeAmbient = "ambient";
inline constexpr std::string_view kDataplaneModeNone = "none";
inline constexpr std::string_view kSidecarStatusAnnotation = "sidecar.istio.io/status";
inline constexpr std::string_view kRedirectionAnnotation = "ambient.istio.io/redirection";
inline constexpr std::string_view kRedirectionEnabled = "enabled";

/// Agent-wide inputs of the decision.
struct EnrollmentConfig {
  /// EXCLUDE_NAMESPACES: never enrolled, whatever their labels (the chart's default: kube-system).
  std::vector<std::string> exclude_namespaces{"kube-system"};
};

/// EXCLUDE_NAMESPACES as the reference reads it: comma-separated, blanks and spaces ignored. Pure.
[[nodiscard]] std::vector<std::string> parse_namespace_list(std::string_view text);

/// Why a pod is or is not enrolled; `to_string` gives the operator-facing words.
enum class EnrollmentReason {
  kPodLabel,           ///< enrolled: pod label istio.io/dataplane-mode=ambient
  kNamespaceLabel,     ///< enrolled: its namespace has the label and the pod does not opt out
  kNotSelected,        ///< neither the pod nor its namespace asks for ambient
  kPodOptedOut,        ///< pod label istio.io/dataplane-mode=none (wins over its namespace's label)
  kHostNetwork,        ///< spec.hostNetwork: the pod shares the node's netns
  kSidecar,            ///< annotation sidecar.istio.io/status: it has its own sidecar proxy
  kExcludedNamespace,  ///< its namespace is in EXCLUDE_NAMESPACES
  kTerminal,           ///< phase Succeeded or Failed: its containers are gone, its IP may be reused
  kTerminating,        ///< deletionTimestamp set: stays as it is until it becomes terminal or is deleted
  kNamespaceUnknown,   ///< the namespace is not (yet) in the cache, and the pod label alone does not enroll
};

[[nodiscard]] std::string_view to_string(EnrollmentReason reason) noexcept;

/// The decision for one pod.
struct EnrollmentDecision {
  bool enroll = false;
  EnrollmentReason reason = EnrollmentReason::kNotSelected;
  friend bool operator==(const EnrollmentDecision&, const EnrollmentDecision&) = default;
};

/// Whether `pod` should be in the mesh (Istio's default enablement selectors, feature map §3.2):
/// enrolled when its label istio.io/dataplane-mode is "ambient", or its namespace's is and its own
/// is not "none"; never with spec.hostNetwork, the sidecar.istio.io/status annotation or an
/// excluded namespace; released once its phase is Succeeded/Failed.
///
/// A pod with a deletionTimestamp is still running its grace period: it keeps its current state
/// (`enrolled_now`) so in-flight connections drain inside the mesh, and is never newly enrolled;
/// its release comes with the terminal phase, the DELETED event or CNI DEL.
///
/// `ns` may be null when the namespace is not cached yet: then only the pod label can enroll and
/// the reason says kNamespaceUnknown (the caller may wait for the namespace). Pure.
[[nodiscard]] EnrollmentDecision decide_enrollment(const Pod& pod, const Namespace* ns, const EnrollmentConfig& config,
                                                   bool enrolled_now = false);

/// True while the pod's sandbox may still hold its IPs: any phase but Succeeded/Failed (a pod
/// being deleted is live until it is gone). Pure.
[[nodiscard]] bool is_live(const Pod& pod);

/// The values the pod informer indexes a pod under (InformerOptions::index): its IPs, unless it
/// uses the host network (those share the node's IPs legitimately). Pure.
[[nodiscard]] std::vector<std::string> pod_ip_index(const Pod& pod);

/// Another live pod that claims one of `pod`'s IPs.
struct IpConflict {
  std::string ip;
  std::string other;      ///< "namespace/name" of the other pod
  std::string other_uid;
};

/// The first conflict between `pod` and `others` (e.g. Informer::by_index(ip) for each of its IPs):
/// a different pod (by uid), live, not hostNetwork, with an IP in common. nullopt when none: then
/// `pod` alone claims its IPs. A terminal pod (a finished Job) never conflicts, so its IP can be
/// reused by a new pod at once. Pure.
[[nodiscard]] std::optional<IpConflict> find_ip_conflict(const Pod& pod,
                                                         std::span<const std::shared_ptr<const Pod>> others);

/// Drops the annotations the node agent never reads (anything outside sidecar.istio.io/status,
/// ambient.istio.io/* and istio.io/*), for InformerOptions::transform: a pod's annotations can
/// hold kilobytes (last-applied-configuration) that a 10,000-pod cache should not keep.
void keep_agent_annotations(Pod& pod);

}  // namespace meshnode::kube
