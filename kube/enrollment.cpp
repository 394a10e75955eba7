#include "kube/enrollment.hpp"

#include <algorithm>

namespace meshnode::kube {

std::vector<std::string> parse_namespace_list(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    auto item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::string_view to_string(EnrollmentReason reason) noexcept {
  switch (reason) {
    case EnrollmentReason::kPodLabel: return "pod label istio.io/dataplane-mode=ambient";
    case EnrollmentReason::kNamespaceLabel: return "namespace label istio.io/dataplane-mode=ambient";
    case EnrollmentReason::kNotSelected: return "neither pod nor namespace is labelled istio.io/dataplane-mode=ambient";
    case EnrollmentReason::kPodOptedOut: return "pod label istio.io/dataplane-mode=none";
    case EnrollmentReason::kHostNetwork: return "pod uses the host network";
    case EnrollmentReason::kSidecar: return "pod has a sidecar (annotation sidecar.istio.io/status)";
    case EnrollmentReason::kExcludedNamespace: return "namespace is excluded (EXCLUDE_NAMESPACES)";
    case EnrollmentReason::kTerminal: return "pod phase is Succeeded or Failed";
    case EnrollmentReason::kTerminating: return "pod is terminating (deletionTimestamp set)";
    case EnrollmentReason::kNamespaceUnknown: return "namespace not known yet";
  }
  return "unknown";
}

bool is_live(const Pod& pod) { return pod.phase != "Succeeded" && pod.phase != "Failed"; }

EnrollmentDecision decide_enrollment(const Pod& pod, const Namespace* ns, const EnrollmentConfig& config,
                                     bool enrolled_now) {
  using R = EnrollmentReason;
  if (!is_live(pod)) return {false, R::kTerminal};
  if (pod.host_network) return {false, R::kHostNetwork};
  if (pod.metadata.annotations.contains(kSidecarStatusAnnotation)) return {false, R::kSidecar};
  const auto& excluded = config.exclude_namespaces;
  if (std::find(excluded.begin(), excluded.end(), pod.metadata.namespace_) != excluded.end()) {
    return {false, R::kExcludedNamespace};
  }
  const std::string* pod_mode = pod.metadata.labels.find(kDataplaneModeLabel);
  EnrollmentDecision selected;
  if (pod_mode && *pod_mode == kDataplaneModeAmbient) {
    selected = {true, R::kPodLabel};
  } else if (pod_mode && *pod_mode == kDataplaneModeNone) {
    return {false, R::kPodOptedOut};
  } else if (ns == nullptr) {
    return {false, R::kNamespaceUnknown};
  } else if (const std::string* ns_mode = ns->metadata.labels.find(kDataplaneModeLabel);
             !ns_mode || *ns_mode != kDataplaneModeAmbient) {
    return {false, R::kNotSelected};
  } else {
    selected = {true, R::kNamespaceLabel};
  }
  if (pod.metadata.deletion_timestamp) return {enrolled_now, R::kTerminating};
  return selected;
}

std::vector<std::string> pod_ip_index(const Pod& pod) {
  if (pod.host_network) return {};
  return pod.pod_ips;
}

std::optional<IpConflict> find_ip_conflict(const Pod& pod, std::span<const std::shared_ptr<const Pod>> others) {
  if (pod.host_network) return std::nullopt;
  for (const auto& other : others) {
    if (!other || other->metadata.uid == pod.metadata.uid || other->host_network || !is_live(*other)) continue;
    for (const auto& ip : pod.pod_ips) {
      if (std::find(other->pod_ips.begin(), other->pod_ips.end(), ip) != other->pod_ips.end()) {
        return IpConflict{ip, object_key(other->metadata), other->metadata.uid};
      }
    }
  }
  return std::nullopt;
}

void keep_agent_annotations(Pod& pod) {
  std::vector<StringMap::Entry> kept;
  for (const auto& entry : pod.metadata.annotations.entries()) {
    const std::string_view key = entry.first;
    if (key == kSidecarStatusAnnotation || key.starts_with("ambient.istio.io/") || key.starts_with("istio.io/")) {
      kept.push_back(entry);
    }
  }
  pod.metadata.annotations = StringMap(std::move(kept));
}

}  // namespace meshnode::kube
