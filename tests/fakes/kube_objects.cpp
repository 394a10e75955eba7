#include "fakes/kube_objects.hpp"

#include "k8s_meta.pb.h"
#include "k8s_runtime.pb.h"
#include "kube_fixture.pb.h"

namespace meshnode::fakes {
namespace {

using nlohmann::json;
namespace pb = meshnode::test::k8s;
namespace metav1 = k8s::io::apimachinery::pkg::apis::meta::v1;
namespace runtime = k8s::io::apimachinery::pkg::runtime;

constexpr long long kCreated = 1767945600;  // 2026-01-09T08:00:00Z

std::string rfc3339(long long seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void set_time(metav1::Time* t, long long seconds) { t->set_seconds(seconds); }

json managed_fields_json() {
  // What kube-controller-manager, kubelet and a CNI-agent-like writer leave on a real pod.
  const json spec_fields{{"f:metadata", {{"f:generateName", json::object()}, {"f:labels", {{".", json::object()},
                                                                                         {"f:app", json::object()}}}}},
                         {"f:spec", {{"f:containers", {{"k:{\"name\":\"web\"}", {{".", json::object()},
                                                                                 {"f:image", json::object()}}}}}}}};
  const json status_fields{{"f:status", {{"f:conditions", json::object()}, {"f:containerStatuses", json::object()},
                                         {"f:podIP", json::object()}, {"f:podIPs", json::object()}}}};
  return json::array({{{"manager", "kube-controller-manager"}, {"operation", "Update"}, {"apiVersion", "v1"},
                       {"time", rfc3339(kCreated)}, {"fieldsType", "FieldsV1"}, {"fieldsV1", spec_fields}},
                      {{"manager", "kubelet"}, {"operation", "Update"}, {"apiVersion", "v1"},
                       {"time", rfc3339(kCreated + 5)}, {"fieldsType", "FieldsV1"}, {"fieldsV1", status_fields},
                       {"subresource", "status"}}});
}

json container_json(const std::string& name, const std::string& image, int port) {
  return {{"name", name},
          {"image", image},
          {"args", json::array({"--port=" + std::to_string(port), "--log-format=json"})},
          {"ports", json::array({{{"name", "http"}, {"containerPort", port}, {"protocol", "TCP"}}})},
          {"env", json::array({{{"name", "GOMAXPROCS"}, {"value", "2"}}, {{"name", "LOG_LEVEL"}, {"value", "info"}}})},
          {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}}}},
          {"volumeMounts", json::array({{{"name", "kube-api-access-5xq2z"},
                                         {"readOnly", true},
                                         {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"}}})},
          {"terminationMessagePath", "/dev/termination-log"},
          {"terminationMessagePolicy", "File"},
          {"imagePullPolicy", "IfNotPresent"}};
}

}  // namespace

json pod_json(const PodFacts& f) {
  json meta{{"name", f.name},
            {"generateName", f.name.substr(0, f.name.rfind('-') + 1)},
            {"namespace", f.namespace_},
            {"uid", f.uid},
            {"resourceVersion", f.resource_version},
            {"creationTimestamp", rfc3339(kCreated)},
            {"labels", f.labels},
            {"annotations", f.annotations},
            {"ownerReferences", json::array({{{"apiVersion", "apps/v1"},
                                              {"kind", "ReplicaSet"},
                                              {"name", "web-7d4b9c8f5d"},
                                              {"uid", "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"},
                                              {"controller", true},
                                              {"blockOwnerDeletion", true}}})},
            {"managedFields", managed_fields_json()}};
  if (f.deletion_timestamp) {
    meta["deletionTimestamp"] = rfc3339(f.deletion_timestamp);
    meta["deletionGracePeriodSeconds"] = 30;
  }
  json spec{{"volumes", json::array({{{"name", "kube-api-access-5xq2z"},
                                      {"projected", {{"defaultMode", 420},
                                                     {"sources", json::array({{{"serviceAccountToken",
                                                                                {{"expirationSeconds", 3607},
                                                                                 {"path", "token"}}}}})}}}}})},
            {"containers", json::array({container_json("web", "registry.example/shop/web:1.42.0", 8080),
                                        container_json("metrics", "registry.example/shop/exporter:0.9.1", 9100)})},
            {"restartPolicy", "Always"},
            {"terminationGracePeriodSeconds", 30},
            {"dnsPolicy", "ClusterFirst"},
            {"serviceAccountName", f.service_account},
            {"serviceAccount", f.service_account},
            {"nodeName", f.node},
            {"schedulerName", "default-scheduler"},
            {"tolerations", json::array({{{"key", "node.kubernetes.io/not-ready"}, {"operator", "Exists"},
                                          {"effect", "NoExecute"}, {"tolerationSeconds", 300}},
                                         {{"key", "node.kubernetes.io/unreachable"}, {"operator", "Exists"},
                                          {"effect", "NoExecute"}, {"tolerationSeconds", 300}}})},
            {"priority", 0},
            {"enableServiceLinks", true},
            {"preemptionPolicy", "PreemptLowerPriority"}};
  if (f.host_network) spec["hostNetwork"] = true;
  json conditions = json::array();
  for (const char* type : {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"}) {
    conditions.push_back({{"type", type}, {"status", "True"}, {"lastProbeTime", nullptr},
                          {"lastTransitionTime", rfc3339(kCreated + 3)}});
  }
  json status{{"phase", f.phase},
              {"conditions", conditions},
              {"hostIP", "192.168.10.11"},
              {"hostIPs", json::array({{{"ip", "192.168.10.11"}}})},
              {"startTime", rfc3339(kCreated + 1)},
              {"containerStatuses", json::array()},
              {"qosClass", "Burstable"}};
  for (const char* name : {"web", "metrics"}) {
    status["containerStatuses"].push_back({{"name", name}, {"ready", true}, {"restartCount", 0},
                                           {"image", std::string("registry.example/shop/") + name},
                                           {"imageID", "registry.example/shop/web@sha256:9f86d081884c7d659a2feaa0c55ad015"},
                                           {"containerID", "containerd://4e07408562bedb8b60ce05c1decfe3ad16b72230"},
                                           {"started", true},
                                           {"state", {{"running", {{"startedAt", rfc3339(kCreated + 4)}}}}}});
  }
  if (!f.ips.empty()) {
    status["podIP"] = f.ips.front();
    status["podIPs"] = json::array();
    for (const auto& ip : f.ips) status["podIPs"].push_back({{"ip", ip}});
  }
  return {{"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", meta}, {"spec", spec}, {"status", status}};
}

std::string pod_proto(const PodFacts& f) {
  const json j = pod_json(f);
  pb::Pod pod;
  auto* m = pod.mutable_metadata();
  m->set_name(f.name);
  m->set_generatename(j["metadata"]["generateName"]);
  m->set_namespace_(f.namespace_);
  m->set_uid(f.uid);
  m->set_resourceversion(f.resource_version);
  set_time(m->mutable_creationtimestamp(), kCreated);
  if (f.deletion_timestamp) {
    set_time(m->mutable_deletiontimestamp(), f.deletion_timestamp);
    m->set_deletiongraceperiodseconds(30);
  }
  for (const auto& [k, v] : f.labels) (*m->mutable_labels())[k] = v;
  for (const auto& [k, v] : f.annotations) (*m->mutable_annotations())[k] = v;
  auto* owner = m->add_ownerreferences();
  owner->set_apiversion("apps/v1");
  owner->set_kind("ReplicaSet");
  owner->set_name("web-7d4b9c8f5d");
  owner->set_uid("0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d");
  owner->set_controller(true);
  owner->set_blockownerdeletion(true);
  for (const auto& mf : j["metadata"]["managedFields"]) {
    auto* e = m->add_managedfields();
    e->set_manager(mf["manager"]);
    e->set_operation(mf["operation"]);
    e->set_apiversion(mf["apiVersion"]);
    set_time(e->mutable_time(), kCreated);
    e->set_fieldstype(mf["fieldsType"]);
    e->mutable_fieldsv1()->set_raw(mf["fieldsV1"].dump());
    if (mf.contains("subresource")) e->set_subresource(mf["subresource"]);
  }
  auto* spec = pod.mutable_spec();
  spec->add_volumes()->set_name("kube-api-access-5xq2z");
  for (const auto& c : j["spec"]["containers"]) {
    auto* out = spec->add_containers();
    out->set_name(c["name"]);
    out->set_image(c["image"]);
    for (const auto& a : c["args"]) out->add_args(a);
    auto* port = out->add_ports();
    port->set_name("http");
    port->set_containerport(c["ports"][0]["containerPort"]);
    port->set_protocol("TCP");
    for (const auto& e : c["env"]) {
      auto* env = out->add_env();
      env->set_name(e["name"]);
      env->set_value(e["value"]);
    }
    auto* mount = out->add_volumemounts();
    mount->set_name("kube-api-access-5xq2z");
    mount->set_readonly(true);
    mount->set_mountpath("/var/run/secrets/kubernetes.io/serviceaccount");
    out->set_terminationmessagepath("/dev/termination-log");
    out->set_imagepullpolicy("IfNotPresent");
    out->set_terminationmessagepolicy("File");
  }
  spec->set_restartpolicy("Always");
  spec->set_terminationgraceperiodseconds(30);
  spec->set_dnspolicy("ClusterFirst");
  spec->set_serviceaccountname(f.service_account);
  spec->set_serviceaccount(f.service_account);
  spec->set_nodename(f.node);
  spec->set_hostnetwork(f.host_network);
  spec->set_schedulername("default-scheduler");
  for (const char* key : {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}) {
    auto* t = spec->add_tolerations();
    t->set_key(key);
    t->set_operator_("Exists");
    t->set_effect("NoExecute");
    t->set_tolerationseconds(300);
  }
  spec->set_priority(0);
  spec->set_enableservicelinks(true);
  spec->set_preemptionpolicy("PreemptLowerPriority");
  auto* status = pod.mutable_status();
  status->set_phase(f.phase);
  for (const auto& c : j["status"]["conditions"]) {
    auto* cond = status->add_conditions();
    cond->set_type(c["type"]);
    cond->set_status("True");
    set_time(cond->mutable_lastprobetime(), 0);
    set_time(cond->mutable_lasttransitiontime(), kCreated + 3);
  }
  status->set_hostip("192.168.10.11");
  status->add_hostips()->set_ip("192.168.10.11");
  set_time(status->mutable_starttime(), kCreated + 1);
  for (const auto& c : j["status"]["containerStatuses"]) {
    auto* cs = status->add_containerstatuses();
    cs->set_name(c["name"]);
    cs->set_ready(true);
    cs->set_restartcount(0);
    cs->set_image(c["image"]);
    cs->set_imageid(c["imageID"]);
    cs->set_containerid(c["containerID"]);
    cs->set_started(true);
  }
  status->set_qosclass("Burstable");
  if (!f.ips.empty()) status->set_podip(f.ips.front());
  for (const auto& ip : f.ips) status->add_podips()->set_ip(ip);
  status->set_observedgeneration(1);
  return pod.SerializeAsString();
}

json namespace_json(const std::string& name, const std::map<std::string, std::string>& labels, const std::string& uid,
                    const std::string& resource_version) {
  auto all = labels;
  all["kubernetes.io/metadata.name"] = name;
  return {{"kind", "Namespace"},
          {"apiVersion", "v1"},
          {"metadata", {{"name", name}, {"uid", uid}, {"resourceVersion", resource_version},
                        {"creationTimestamp", rfc3339(kCreated)}, {"labels", all}}},
          {"spec", {{"finalizers", json::array({"kubernetes"})}}},
          {"status", {{"phase", "Active"}}}};
}

std::string namespace_proto(const std::string& name, const std::map<std::string, std::string>& labels,
                            const std::string& uid, const std::string& resource_version) {
  pb::Namespace ns;
  ns.mutable_metadata()->set_name(name);
  ns.mutable_metadata()->set_uid(uid);
  ns.mutable_metadata()->set_resourceversion(resource_version);
  set_time(ns.mutable_metadata()->mutable_creationtimestamp(), kCreated);
  for (const auto& [k, v] : labels) (*ns.mutable_metadata()->mutable_labels())[k] = v;
  (*ns.mutable_metadata()->mutable_labels())["kubernetes.io/metadata.name"] = name;
  ns.mutable_spec()->add_finalizers("kubernetes");
  ns.mutable_status()->set_phase("Active");
  return ns.SerializeAsString();
}

std::string protobuf_envelope(const std::string& kind, const std::string& raw, const std::string& api_version) {
  runtime::Unknown unknown;
  unknown.mutable_typemeta()->set_apiversion(api_version);
  unknown.mutable_typemeta()->set_kind(kind);
  unknown.set_raw(raw);
  unknown.set_contentencoding("");
  unknown.set_contenttype("");
  return std::string("k8s\0", 4) + unknown.SerializeAsString();
}

std::string protobuf_list(const std::string& list_kind, const std::vector<std::string>& item_raws,
                          const std::string& resource_version, const std::string& continue_token) {
  metav1::ListMeta meta;
  meta.set_resourceversion(resource_version);
  if (!continue_token.empty()) meta.set_continue_(continue_token);
  // Lists are ListMeta (field 1) + items (field 2): written by hand so Pod and Namespace share it.
  std::string raw;
  auto put = [&raw](int field, const std::string& bytes) {
    raw.push_back(static_cast<char>(field << 3 | 2));
    std::size_t n = bytes.size();
    while (n >= 0x80) {
      raw.push_back(static_cast<char>((n & 0x7f) | 0x80));
      n >>= 7;
    }
    raw.push_back(static_cast<char>(n));
    raw += bytes;
  };
  put(1, meta.SerializeAsString());
  for (const auto& item : item_raws) put(2, item);
  return protobuf_envelope(list_kind, raw);
}

std::string protobuf_watch_frame(const std::string& type, const std::string& enveloped_object) {
  metav1::WatchEvent event;
  event.set_type(type);
  event.mutable_object()->set_raw(enveloped_object);
  const std::string body = event.SerializeAsString();
  const auto n = static_cast<std::uint32_t>(body.size());
  std::string frame{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                    static_cast<char>(n)};
  return frame + body;
}

std::string protobuf_status(int code, const std::string& reason, const std::string& message) {
  metav1::Status status;
  status.mutable_metadata();
  status.set_status("Failure");
  status.set_message(message);
  status.set_reason(reason);
  status.set_code(code);
  return protobuf_envelope("Status", status.SerializeAsString());
}

std::string json_watch_line(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

}  // namespace meshnode::fakes
