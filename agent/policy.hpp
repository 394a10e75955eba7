#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace meshnode::agent {

/// Which pods the agent enrolls, without Kubernetes (issue 4): a pod is enrolled when its namespace
/// matches `enroll_namespaces` or its name matches `enroll_pod_name_patterns`, and its namespace
/// matches none of `exclude_namespaces` (exclusion always wins). Entries are shell globs (`*`, `?`,
/// `[...]`, fnmatch(3)), so a plain name matches itself.
struct EnrollmentPolicy {
  std::vector<std::string> enroll_namespaces;
  std::vector<std::string> enroll_pod_name_patterns;
  std::vector<std::string> exclude_namespaces{"kube-system"};
};

/// Parses the policy YAML: `enrollNamespaces: [..]`, `enrollPodNamePatterns: [..]`,
/// `excludeNamespaces: [..]` (absent → [kube-system]); every key optional, an empty document is the
/// empty policy (enrolls nothing). Errc::kConfig naming the key for a non-list, a non-string entry,
/// an unknown key or unparsable YAML.
[[nodiscard]] base::Result<EnrollmentPolicy> parse_policy(std::string_view yaml);

/// `parse_policy` of the file at `path`; Errc::kConfig naming the path when it cannot be read.
[[nodiscard]] base::Result<EnrollmentPolicy> load_policy(const std::string& path);

/// The decision for one pod and why, e.g. {false, "namespace kube-system is excluded"}.
struct Enrollment {
  bool enroll = false;
  std::string reason;
};

/// Decides whether the pod `namespace_/name` is enrolled. Pure.
[[nodiscard]] Enrollment decide(const EnrollmentPolicy& policy, std::string_view namespace_, std::string_view name);

}  // namespace meshnode::agent
