// Enrollment policy file and decision.
#include "agent/policy.hpp"

#include <fnmatch.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;

base::Result<std::vector<std::string>> string_list(const YAML::Node& node, const char* key) {
  if (node.IsNull()) return std::vector<std::string>{};
  if (!node.IsSequence()) return fail(Errc::kConfig, std::string(key) + ": must be a list of strings");
  std::vector<std::string> out;
  for (const YAML::Node& item : node) {
    if (!item.IsScalar() || item.Scalar().empty()) {
      return fail(Errc::kConfig, std::string(key) + ": entries must be non-empty strings");
    }
    out.push_back(item.Scalar());
  }
  return out;
}

const std::string* first_match(const std::vector<std::string>& globs, std::string_view value) {
  const std::string text(value);
  for (const std::string& glob : globs) {
    if (::fnmatch(glob.c_str(), text.c_str(), 0) == 0) return &glob;
  }
  return nullptr;
}

}  // namespace

base::Result<EnrollmentPolicy> parse_policy(std::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return fail(Errc::kConfig, std::string("policy YAML: ") + e.what());
  }
  EnrollmentPolicy policy;
  if (root.IsNull()) return policy;
  if (!root.IsMap()) return fail(Errc::kConfig, "policy YAML: top level must be a map");
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    std::vector<std::string>* target = nullptr;
    if (key == "enrollNamespaces") target = &policy.enroll_namespaces;
    if (key == "enrollPodNamePatterns") target = &policy.enroll_pod_name_patterns;
    if (key == "excludeNamespaces") target = &policy.exclude_namespaces;
    if (target == nullptr) return fail(Errc::kConfig, "policy YAML: unknown key " + key);
    auto list = string_list(entry.second, key.c_str());
    if (!list) return std::unexpected(list.error());
    *target = std::move(*list);
  }
  return policy;
}

base::Result<EnrollmentPolicy> load_policy(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(Errc::kConfig, "cannot read policy file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto policy = parse_policy(text.str());
  if (!policy) return fail(Errc::kConfig, path + ": " + policy.error().context);
  return policy;
}

Enrollment decide(const EnrollmentPolicy& policy, std::string_view namespace_, std::string_view name) {
  const std::string ns(namespace_);
  if (const auto* glob = first_match(policy.exclude_namespaces, namespace_)) {
    return {false, "namespace " + ns + " is excluded (" + *glob + ")"};
  }
  if (const auto* glob = first_match(policy.enroll_namespaces, namespace_)) {
    return {true, "namespace " + ns + " is enrolled (" + *glob + ")"};
  }
  if (const auto* glob = first_match(policy.enroll_pod_name_patterns, name)) {
    return {true, "pod name matches " + *glob};
  }
  return {false, "no enrollment rule matches " + ns + "/" + std::string(name)};
}

}  // namespace meshnode::agent
