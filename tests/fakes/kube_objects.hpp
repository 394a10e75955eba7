#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace meshnode::fakes {

/// The facts of one test pod; everything else about it is filled in realistically (a Deployment's
/// pod: owner reference, pod-template-hash, two containers with ports/env/mounts, five
/// conditions, container statuses, managed fields of three managers, a projected token volume).
struct PodFacts {
  std::string name = "web-7d4b9c8f5d-x2x9k";
  std::string namespace_ = "shop";
  std::string uid = "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
  std::string resource_version = "48213";
  std::string node = "node-1";
  std::string service_account = "web";
  std::string phase = "Running";
  std::vector<std::string> ips{"10.244.1.17"};
  bool host_network = false;
  long long deletion_timestamp = 0;  ///< seconds since the epoch; 0 = not being deleted
  std::map<std::string, std::string> labels{{"app", "web"}, {"pod-template-hash", "7d4b9c8f5d"}};
  std::map<std::string, std::string> annotations{{"kubectl.kubernetes.io/restartedAt", "2026-01-10T08:00:00Z"}};
};

/// The pod as the API server's JSON (kind/apiVersion included, as in a GET or a watch event).
nlohmann::json pod_json(const PodFacts& facts);

/// The pod as a protobuf core/v1 Pod message (no envelope), with the fields of `pod_json` that the
/// fixture schema models.
std::string pod_proto(const PodFacts& facts);

/// A namespace, JSON and protobuf (no envelope), with the labels the API server adds.
nlohmann::json namespace_json(const std::string& name, const std::map<std::string, std::string>& labels,
                              const std::string& uid, const std::string& resource_version);
std::string namespace_proto(const std::string& name, const std::map<std::string, std::string>& labels,
                            const std::string& uid, const std::string& resource_version);

/// "k8s\0" + runtime.Unknown{typeMeta{apiVersion, kind}, raw} (contentEncoding/contentType present
/// and empty, as the API server writes them).
std::string protobuf_envelope(const std::string& kind, const std::string& raw, const std::string& api_version = "v1");

/// A PodList / NamespaceList body: envelope(list_kind, ListMeta + items).
std::string protobuf_list(const std::string& list_kind, const std::vector<std::string>& item_raws,
                          const std::string& resource_version, const std::string& continue_token = {});

/// One protobuf watch frame: 4-byte big-endian length + WatchEvent{type, object.raw = enveloped}.
std::string protobuf_watch_frame(const std::string& type, const std::string& enveloped_object);

/// A metav1.Status, enveloped (kind Status).
std::string protobuf_status(int code, const std::string& reason, const std::string& message);

/// One JSON watch line: {"type":..,"object":..}\n.
std::string json_watch_line(const std::string& type, const nlohmann::json& object);

}  // namespace meshnode::fakes
