// Writes the seed corpus of kube_fuzz (tests/fuzz/corpus/kube/) from the kube tests' realistic
// fixtures (tests/fakes/kube_objects: a Deployment's pod and a labelled namespace as the API server
// encodes them, JSON and protobuf). Run by hand after a fixture change:
//   build/fuzz/tests/fuzz/kube_seeds tests/fuzz/corpus/kube
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "fakes/kube_objects.hpp"

namespace {

namespace fakes = meshnode::fakes;

enum Kind { kPodList = 0, kNamespaceList, kPod, kNamespace, kStatus, kPodEvent, kPodStream, kNamespaceEvent };

void write(const std::filesystem::path& dir, const std::string& name, bool json, Kind kind, const std::string& body) {
  std::ofstream out(dir / name, std::ios::binary);
  out.put(static_cast<char>((json ? 1 : 0) | kind << 1));
  out << body;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kube_seeds <corpus dir>\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  fakes::PodFacts pod;
  fakes::PodFacts terminating = pod;
  terminating.name = "web-7d4b9c8f5d-q8w2e";
  terminating.uid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
  terminating.ips = {"10.244.1.18", "fd00:10:244:1::18"};
  terminating.deletion_timestamp = 1767600000;
  const std::map<std::string, std::string> ns_labels{{"istio.io/dataplane-mode", "ambient"},
                                                     {"kubernetes.io/metadata.name", "shop"}};
  const std::string pod_raw = fakes::pod_proto(pod), ns_raw = fakes::namespace_proto("shop", ns_labels, "ns-uid-1", "17");

  write(dir, "pod_json", true, kPod, fakes::pod_json(pod).dump());
  write(dir, "pod_protobuf", false, kPod, fakes::protobuf_envelope("Pod", pod_raw));
  write(dir, "namespace_json", true, kNamespace, fakes::namespace_json("shop", ns_labels, "ns-uid-1", "17").dump());
  write(dir, "namespace_protobuf", false, kNamespace, fakes::protobuf_envelope("Namespace", ns_raw));
  write(dir, "podlist_protobuf", false, kPodList,
        fakes::protobuf_list("PodList", {pod_raw, fakes::pod_proto(terminating)}, "48250", "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"));
  write(dir, "podlist_json", true, kPodList,
        nlohmann::json{{"kind", "PodList"}, {"apiVersion", "v1"},
                       {"metadata", {{"resourceVersion", "48250"}, {"remainingItemCount", 3}}},
                       {"items", {fakes::pod_json(pod), fakes::pod_json(terminating)}}}
            .dump());
  write(dir, "namespacelist_protobuf", false, kNamespaceList, fakes::protobuf_list("NamespaceList", {ns_raw}, "17"));
  write(dir, "status_protobuf", false, kStatus, fakes::protobuf_status(410, "Expired", "too old resource version: 10 (48213)"));
  write(dir, "status_json", true, kStatus,
        R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found",)"
        R"("reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404})");
  write(dir, "event_protobuf", false, kPodEvent,
        fakes::protobuf_watch_frame("MODIFIED", fakes::protobuf_envelope("Pod", pod_raw)).substr(4));
  write(dir, "event_json", true, kPodEvent, fakes::json_watch_line("DELETED", fakes::pod_json(terminating)));
  write(dir, "ns_event_json", true, kNamespaceEvent,
        fakes::json_watch_line("ADDED", fakes::namespace_json("shop", ns_labels, "ns-uid-1", "17")));
  write(dir, "stream_protobuf", false, kPodStream,
        fakes::protobuf_watch_frame("ADDED", fakes::protobuf_envelope("Pod", pod_raw)) +
            fakes::protobuf_watch_frame("DELETED", fakes::protobuf_envelope("Pod", fakes::pod_proto(terminating))) +
            fakes::protobuf_watch_frame("ERROR", fakes::protobuf_status(410, "Expired", "too old resource version")));
  write(dir, "stream_json", true, kPodStream,
        fakes::json_watch_line("ADDED", fakes::pod_json(pod)) + "\n" +
            fakes::json_watch_line("BOOKMARK", {{"kind", "Pod"}, {"apiVersion", "v1"},
                                                {"metadata", {{"resourceVersion", "48300"}}}}) +
            fakes::json_watch_line("ERROR", {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                                             {"reason", "Expired"}, {"code", 410}}));
  return 0;
}
