#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

namespace meshnode::deploy {

/// The objects `kubectl kustomize <dir>` renders, in output order.
struct Rendered {
  std::vector<YAML::Node> objects;
  std::string error;  ///< non-empty when kubectl failed or printed something that is not YAML
};

/// Runs `kubectl kustomize <dir>` (kubectl's built-in kustomize: v5.5 with kubectl 1.32) and parses
/// every document. Blocking.
Rendered render(const std::string& dir);

/// The object of `kind` named `name` (an invalid node when there is none).
YAML::Node find(const std::vector<YAML::Node>& objects, const std::string& kind, const std::string& name);

/// Every object of `kind`.
std::vector<YAML::Node> all_of(const std::vector<YAML::Node>& objects, const std::string& kind);

/// The DaemonSet whose pod template has a container named `container` (an invalid node if none).
YAML::Node daemonset_with(const std::vector<YAML::Node>& objects, const std::string& container);

/// The container named `name` of a workload's pod template.
YAML::Node container_of(const YAML::Node& workload, const std::string& name);

/// A string list node as a vector ({} when absent).
std::vector<std::string> strings(const YAML::Node& list);

/// The env of a container: name → literal value ("" for valueFrom entries).
std::map<std::string, std::string> env_of(const YAML::Node& container);

/// One volumeMount resolved against the pod's volumes.
struct Mount {
  std::string name;
  std::string mount_path;
  bool read_only = false;
  std::string propagation;  ///< mountPropagation, "" when absent
  std::string kind;         ///< "hostPath", "configMap", "secret", "emptyDir", "projected", or "" if undefined
  std::string source;       ///< hostPath path, ConfigMap or Secret name
};

/// The container's mounts, with their volumes from the pod template.
std::vector<Mount> mounts_of(const YAML::Node& workload, const YAML::Node& container);

}  // namespace meshnode::deploy
