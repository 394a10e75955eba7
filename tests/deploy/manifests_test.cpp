// Issue 14: every kustomize overlay renders with kubectl's built-in kustomize, and the objects are
// what a node component needs and no more: images, capabilities, mounts, RBAC verbs, env names,
// probe ports, update strategies, and for replace-istio Istio's names, selectors, sockets and ports.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "deploy/manifests.hpp"

namespace meshnode::deploy {
namespace {

const std::string kRoot = std::string(MESHNODE_SOURCE_DIR) + "/deploy/kubernetes";
const std::string kImage = std::string("localhost/meshnode:") + MESHNODE_VERSION;  // scripts/image.sh's default tag

// Env names a meshnode container may carry: the reference's (research §3.1 ztunnel, §3.2 istio-cni),
// so Istio values map across, or meshnode's own (MESHNODE_*).
const std::set<std::string> kZtunnelEnv = {
    "PROXY_MODE", "INPOD_UDS", "CONNECTION_TERMINATION_DEADLINE", "ZTUNNEL_WORKER_THREADS", "LOCAL_XDS_PATH",
    "XDS_ADDRESS", "CA_ADDRESS", "XDS_ROOT_CA", "CA_ROOT_CA", "AUTH_TOKEN", "TRUST_DOMAIN", "ISTIO_META_CLUSTER_ID",
    "NODE_NAME", "POD_NAME", "POD_NAMESPACE", "INSTANCE_IP", "SERVICE_ACCOUNT", "LOG_LEVEL", "UNSTABLE_ENABLE_SOCKS5"};
const std::set<std::string> kIstioCniEnv = {
    "MOUNTED_CNI_NET_DIR", "CNI_BIN_DIR", "CNI_CONF_NAME", "CHAINED_CNI_PLUGIN", "EXCLUDE_NAMESPACES",
    "CNI_AGENT_RUN_DIR", "ZTUNNEL_UDS_ADDRESS", "MONITORING_PORT", "NATIVE_NFTABLES", "AMBIENT_DISABLE_SAFE_UPGRADE",
    "AMBIENT_ENABLEMENT_SELECTOR", "NODE_NAME", "POD_NAME", "POD_NAMESPACE", "LOG_LEVEL"};

/// `render` once per directory per test run (each kubectl run takes ~0.3 s).
const Rendered& rendered(const std::string& dir) {
  static std::map<std::string, Rendered> cache;
  auto it = cache.find(dir);
  if (it == cache.end()) it = cache.emplace(dir, render(dir)).first;
  return it->second;
}

bool kubectl_missing() { return std::system("command -v kubectl >/dev/null 2>&1") != 0; }
bool is_ci() { return std::getenv("CI") != nullptr && std::string(std::getenv("CI")) == "true"; }

struct Overlay {
  std::string dir;        ///< under deploy/kubernetes/overlays
  std::string ns;         ///< the namespace every namespaced object lands in
  std::string proxy_ds;   ///< DaemonSet names
  std::string agent_ds;
  bool owns_namespace;
};

const Overlay kOverlays[] = {
    {"standalone", "meshnode-system", "meshnode-proxy", "meshnode-agent", true},
    {"istio", "meshnode-system", "meshnode-proxy", "meshnode-agent", true},
    {"replace-istio", "istio-system", "ztunnel", "istio-cni-node", false},
};

void PrintTo(const Overlay& o, std::ostream* os) { *os << o.dir; }

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

class ManifestsTest : public ::testing::TestWithParam<Overlay> {
 protected:
  void SetUp() override {
    if (kubectl_missing()) {
      if (is_ci()) FAIL() << "kubectl missing (scripts/install-deps.sh installs it)";
      GTEST_SKIP() << "kubectl missing (scripts/install-deps.sh installs it)";
    }
    const Rendered& r = rendered(kRoot + "/overlays/" + GetParam().dir);
    ASSERT_EQ(r.error, "");
    objects_ = r.objects;
    ASSERT_FALSE(objects_.empty());
    proxy_ = find(objects_, "DaemonSet", GetParam().proxy_ds);
    agent_ = find(objects_, "DaemonSet", GetParam().agent_ds);
    ASSERT_TRUE(proxy_.IsDefined()) << "no DaemonSet " << GetParam().proxy_ds;
    ASSERT_TRUE(agent_.IsDefined()) << "no DaemonSet " << GetParam().agent_ds;
  }
  YAML::Node proxy_container() const { return container_of(proxy_, "meshnode-proxy"); }
  YAML::Node agent_container() const { return container_of(agent_, "meshnode-agent"); }
  YAML::Node pod(const YAML::Node& ds) const { return ds["spec"]["template"]["spec"]; }
  /// The mount at `path` of `container` in `ds` (kind "" when absent).
  Mount mount_at(const YAML::Node& ds, const YAML::Node& container, const std::string& path) const {
    for (const Mount& m : mounts_of(ds, container)) {
      if (m.mount_path == path) return m;
    }
    return {};
  }

  std::vector<YAML::Node> objects_;
  YAML::Node proxy_, agent_;
};

TEST_P(ManifestsTest, ObjectsParseWithUniqueNamesInTheOverlaysNamespace) {
  std::set<std::string> seen;
  for (const YAML::Node& o : objects_) {
    const std::string kind = o["kind"].as<std::string>("");
    ASSERT_FALSE(o["apiVersion"].as<std::string>("").empty()) << kind;
    ASSERT_FALSE(kind.empty());
    const std::string name = o["metadata"]["name"].as<std::string>("");
    ASSERT_FALSE(name.empty()) << kind;
    const std::string ns = o["metadata"]["namespace"].as<std::string>("");
    EXPECT_TRUE(seen.insert(kind + "/" + ns + "/" + name).second) << "duplicate " << kind << " " << name;
    const bool cluster_scoped = kind == "Namespace" || kind == "ClusterRole" || kind == "ClusterRoleBinding";
    EXPECT_EQ(ns, cluster_scoped ? "" : GetParam().ns) << kind << " " << name;
    const YAML::Node labels = o["metadata"]["labels"];
    ASSERT_TRUE(labels.IsDefined() && labels.IsMap()) << kind << " " << name << " has no labels";
    EXPECT_EQ(labels["app.kubernetes.io/part-of"].as<std::string>(""), "meshnode") << kind << " " << name;
  }
  EXPECT_EQ(find(objects_, "Namespace", GetParam().ns).IsDefined(), GetParam().owns_namespace)
      << "replace-istio must never own istio-system (kubectl delete -k would delete it)";
  EXPECT_EQ(all_of(objects_, "DaemonSet").size(), 2u);
}

TEST_P(ManifestsTest, EveryContainerRunsTheImageScriptsImageBuilds) {
  for (const YAML::Node& ds : all_of(objects_, "DaemonSet")) {
    for (const YAML::Node& c : pod(ds)["containers"]) {
      EXPECT_EQ(c["image"].as<std::string>(""), kImage) << c["name"];
      EXPECT_EQ(c["imagePullPolicy"].as<std::string>(""), "IfNotPresent");
    }
  }
  EXPECT_EQ(strings(proxy_container()["command"]), std::vector<std::string>{"meshnode-proxy"});
  EXPECT_EQ(strings(agent_container()["command"]), std::vector<std::string>{"meshnode-agent"});
}

TEST_P(ManifestsTest, ProxyHasItsOwnNetnsTheZdsDirAndOnlyThreeCapabilities) {
  const YAML::Node spec = pod(proxy_);
  EXPECT_FALSE(spec["hostNetwork"].as<bool>(false));
  EXPECT_FALSE(spec["hostPID"].as<bool>(false));
  EXPECT_FALSE(spec["automountServiceAccountToken"].as<bool>(true)) << "the proxy needs no Kubernetes API token";
  EXPECT_EQ(spec["priorityClassName"].as<std::string>(""), "system-node-critical");
  const YAML::Node sc = proxy_container()["securityContext"];
  EXPECT_FALSE(sc["privileged"].as<bool>(true));
  EXPECT_TRUE(sc["readOnlyRootFilesystem"].as<bool>(false));
  EXPECT_EQ(sc["runAsUser"].as<int>(-1), 0);
  EXPECT_EQ(sc["runAsGroup"].as<int>(-1), 1337);
  EXPECT_EQ(strings(sc["capabilities"]["drop"]), std::vector<std::string>{"ALL"});
  EXPECT_EQ(as_set(strings(sc["capabilities"]["add"])), (std::set<std::string>{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}));
  const Mount zds = mount_at(proxy_, proxy_container(), "/var/run/ztunnel");
  EXPECT_EQ(zds.kind, "hostPath");
  EXPECT_EQ(zds.source, "/var/run/ztunnel");
  for (const Mount& m : mounts_of(proxy_, proxy_container())) {
    EXPECT_NE(m.kind, "") << "mount " << m.name << " has no volume";
    if (m.kind == "hostPath") {
      EXPECT_EQ(m.source, "/var/run/ztunnel") << "the proxy needs no other host path";
    }
  }
  // Readiness on 15021, metrics on 15020 announced for Prometheus.
  const YAML::Node probe = proxy_container()["readinessProbe"]["httpGet"];
  EXPECT_EQ(probe["port"].as<int>(0), 15021);
  EXPECT_EQ(probe["path"].as<std::string>(""), "/healthz/ready");
  const YAML::Node annotations = proxy_["spec"]["template"]["metadata"]["annotations"];
  EXPECT_EQ(annotations["prometheus.io/scrape"].as<std::string>(""), "true");
  EXPECT_EQ(annotations["prometheus.io/port"].as<std::string>(""), "15020");
  EXPECT_EQ(annotations["prometheus.io/path"].as<std::string>(""), "/metrics");
  std::set<int> ports;
  for (const YAML::Node& p : proxy_container()["ports"]) ports.insert(p["containerPort"].as<int>());
  EXPECT_EQ(ports, (std::set<int>{15020, 15021}));
  // The tested zero-failure hand-off: surge, never a gap.
  const YAML::Node rolling = proxy_["spec"]["updateStrategy"]["rollingUpdate"];
  EXPECT_EQ(rolling["maxSurge"].as<int>(-1), 1);
  EXPECT_EQ(rolling["maxUnavailable"].as<int>(-1), 0);
  EXPECT_TRUE(proxy_container()["resources"]["requests"]["memory"].IsDefined());
  EXPECT_FALSE(proxy_container()["resources"]["limits"].IsDefined()) << "an OOM-killed node proxy is an outage";
}

TEST_P(ManifestsTest, AgentHasTheHostNetworkCniDirsSocketsAndNetns) {
  const YAML::Node spec = pod(agent_);
  EXPECT_TRUE(spec["hostNetwork"].as<bool>(false));
  EXPECT_EQ(spec["dnsPolicy"].as<std::string>(""), "ClusterFirstWithHostNet");
  EXPECT_EQ(spec["priorityClassName"].as<std::string>(""), "system-node-critical");
  EXPECT_EQ(agent_["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as<int>(-1), 1);
  const YAML::Node c = agent_container();
  const auto env = env_of(c);
  struct Want {
    const char* path;
    const char* host;
    const char* env;  ///< the env var that must name this mount path ("" for none)
  };
  const Want wants[] = {
      {"/host/etc/cni/net.d", "/etc/cni/net.d", "MOUNTED_CNI_NET_DIR"},
      {"/host/opt/cni/bin", "/opt/cni/bin", "CNI_BIN_DIR"},
      {"/var/run/istio-cni", "/var/run/istio-cni", "CNI_AGENT_RUN_DIR"},
      {"/host/var/run/netns", "/var/run/netns", ""},
      {"/var/run/ztunnel", "/var/run/ztunnel", ""},
      {"/var/run/meshnode-agent", "/var/run/meshnode-agent", ""},
      {"/host/proc", "/proc", ""},
  };
  for (const Want& w : wants) {
    const Mount m = mount_at(agent_, c, w.path);
    EXPECT_EQ(m.kind, "hostPath") << w.path;
    EXPECT_EQ(m.source, w.host) << w.path;
    if (*w.env != '\0') {
      EXPECT_EQ(env.at(w.env), w.path) << w.env;
    }
  }
  EXPECT_EQ(mount_at(agent_, c, "/host/var/run/netns").propagation, "HostToContainer");
  EXPECT_TRUE(mount_at(agent_, c, "/host/proc").read_only);
  EXPECT_EQ(strings(c["args"]).front(), "--netns-root=/host") << "netns paths of CNI events are the host's";
  // The ZDS socket both sides use is the same file in the shared host dir.
  EXPECT_EQ(env.at("ZTUNNEL_UDS_ADDRESS"), "/var/run/ztunnel/ztunnel.sock");
  EXPECT_EQ(env_of(proxy_container()).at("INPOD_UDS"), "/var/run/ztunnel/ztunnel.sock");
  EXPECT_EQ(env.at("AMBIENT_DISABLE_SAFE_UPGRADE"), "false") << "SIGTERM must keep rules and the plugin (upgrade)";
  const YAML::Node sc = c["securityContext"];
  EXPECT_FALSE(sc["privileged"].as<bool>(true));
  EXPECT_EQ(strings(sc["capabilities"]["drop"]), std::vector<std::string>{"ALL"});
  EXPECT_EQ(as_set(strings(sc["capabilities"]["add"])),
            (std::set<std::string>{"NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_PTRACE", "DAC_OVERRIDE"}));
  const YAML::Node probe = c["readinessProbe"]["httpGet"];
  EXPECT_EQ(probe["port"].as<int>(0), 8000);
  EXPECT_EQ(probe["path"].as<std::string>(""), "/readyz");
  std::set<int> ports;
  for (const YAML::Node& p : c["ports"]) ports.insert(p["containerPort"].as<int>());
  EXPECT_EQ(ports, (std::set<int>{8000, 15014}));
  EXPECT_EQ(pod(agent_)["tolerations"][0]["operator"].as<std::string>(""), "Exists") << "every node";
}

TEST_P(ManifestsTest, EnvNamesAreTheReferencesOrMeshnodesOwn) {
  for (const auto& [container, known] : {std::pair{proxy_container(), &kZtunnelEnv}, std::pair{agent_container(), &kIstioCniEnv}}) {
    for (const auto& [name, value] : env_of(container)) {
      EXPECT_TRUE(known->contains(name) || name.starts_with("MESHNODE_"))
          << container["name"] << ": " << name << " is neither the reference's nor MESHNODE_*";
    }
  }
}

TEST_P(ManifestsTest, AgentRbacIsExactlyPodsNamespacesAndPodStatusPatch) {
  const std::string sa = pod(agent_)["serviceAccountName"].as<std::string>("");
  ASSERT_TRUE(find(objects_, "ServiceAccount", sa).IsDefined()) << sa;
  ASSERT_TRUE(find(objects_, "ServiceAccount", pod(proxy_)["serviceAccountName"].as<std::string>("")).IsDefined());
  EXPECT_TRUE(all_of(objects_, "Role").empty());
  EXPECT_TRUE(all_of(objects_, "RoleBinding").empty());
  const auto bindings = all_of(objects_, "ClusterRoleBinding");
  ASSERT_EQ(bindings.size(), 1u) << "only the agent is bound to anything";
  const YAML::Node binding = bindings.front();
  ASSERT_EQ(binding["subjects"].size(), 1u);
  EXPECT_EQ(binding["subjects"][0]["kind"].as<std::string>(""), "ServiceAccount");
  EXPECT_EQ(binding["subjects"][0]["name"].as<std::string>(""), sa);
  EXPECT_EQ(binding["subjects"][0]["namespace"].as<std::string>(""), GetParam().ns);
  const auto roles = all_of(objects_, "ClusterRole");
  ASSERT_EQ(roles.size(), 1u);
  EXPECT_EQ(binding["roleRef"]["name"].as<std::string>(""), roles.front()["metadata"]["name"].as<std::string>(""));
  std::set<std::string> grants;
  for (const YAML::Node& rule : roles.front()["rules"]) {
    for (const auto& group : strings(rule["apiGroups"])) {
      for (const auto& resource : strings(rule["resources"])) {
        for (const auto& verb : strings(rule["verbs"])) grants.insert(group + "/" + resource + ":" + verb);
      }
    }
    EXPECT_FALSE(rule["resourceNames"].IsDefined());
  }
  EXPECT_EQ(grants, (std::set<std::string>{"/pods:get", "/pods:list", "/pods:watch", "/namespaces:get",
                                           "/namespaces:list", "/namespaces:watch", "/pods/status:patch"}));
}

TEST_P(ManifestsTest, VolumesAndSelectorsAreConsistent) {
  for (const YAML::Node& ds : all_of(objects_, "DaemonSet")) {
    const YAML::Node labels = ds["spec"]["template"]["metadata"]["labels"];
    for (const auto& kv : ds["spec"]["selector"]["matchLabels"]) {
      EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>())
          << ds["metadata"]["name"] << ": the template does not match its selector";
    }
    EXPECT_EQ(labels["istio.io/dataplane-mode"].as<std::string>(""), "none") << "node components are never enrolled";
    for (const YAML::Node& c : pod(ds)["containers"]) {
      for (const Mount& m : mounts_of(ds, c)) {
        EXPECT_NE(m.kind, "") << m.name << " mounted but not defined";
        // ConfigMaps we ship must be in the overlay; istio-ca-root-cert is istiod's.
        if (m.kind == "configMap" && m.source != "istio-ca-root-cert") {
          EXPECT_TRUE(find(objects_, "ConfigMap", m.source).IsDefined()) << m.source;
        }
      }
    }
  }
  // The agent runs from the Kubernetes API (issue 13): no --policy (that is the mode without
  // Kubernetes), NODE_NAME from the pod's own spec.nodeName, and an API token mounted.
  for (const YAML::Node& arg : agent_container()["args"]) {
    EXPECT_FALSE(arg.as<std::string>().starts_with("--policy")) << "the agent would ignore the API: " << arg;
  }
  YAML::Node node_name;
  for (const YAML::Node& e : agent_container()["env"]) {
    if (e["name"].as<std::string>() == "NODE_NAME") node_name = e;
  }
  ASSERT_TRUE(node_name.IsDefined() && !node_name.IsNull()) << "NODE_NAME is required in Kubernetes mode";
  EXPECT_EQ(node_name["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(""), "spec.nodeName");
  EXPECT_NE(find(objects_, "ServiceAccount", "meshnode-agent")["automountServiceAccountToken"].as<std::string>("true"), "false");
  EXPECT_NE(pod(agent_)["automountServiceAccountToken"].as<std::string>("true"), "false");
}

TEST_P(ManifestsTest, ProxyConfigurationSourceMatchesTheOverlay) {
  const auto env = env_of(proxy_container());
  if (GetParam().dir == "standalone") {
    EXPECT_EQ(env.count("XDS_ADDRESS"), 0u);
    EXPECT_EQ(env.at("LOCAL_XDS_PATH"), "/etc/meshnode/config.yaml");
    EXPECT_EQ(mount_at(proxy_, proxy_container(), "/etc/meshnode").source, "meshnode-proxy-config");
    const YAML::Node cm = find(objects_, "ConfigMap", "meshnode-proxy-config");
    ASSERT_TRUE(cm["data"]["config.yaml"].IsDefined());
    EXPECT_NO_THROW(YAML::Load(cm["data"]["config.yaml"].as<std::string>()));
    const Mount ca = mount_at(proxy_, proxy_container(), env.at("MESHNODE_CA_DIR"));
    EXPECT_EQ(ca.kind, "secret");
    EXPECT_EQ(ca.source, "meshnode-ca");
    EXPECT_TRUE(ca.read_only);
  } else {
    EXPECT_EQ(env.count("LOCAL_XDS_PATH"), 0u);
    EXPECT_EQ(env.at("XDS_ADDRESS"), "istiod.istio-system.svc:15012");
    EXPECT_EQ(env.at("CA_ADDRESS"), "istiod.istio-system.svc:15012");
    EXPECT_EQ(mount_at(proxy_, proxy_container(), "/var/run/secrets/istio").source, "istio-ca-root-cert");
    EXPECT_EQ(env.at("XDS_ROOT_CA"), "/var/run/secrets/istio/root-cert.pem");
    EXPECT_EQ(mount_at(proxy_, proxy_container(), "/var/run/secrets/tokens").kind, "projected");
    bool token = false;
    for (const YAML::Node& v : pod(proxy_)["volumes"]) {
      if (!v["projected"]) continue;
      for (const YAML::Node& s : v["projected"]["sources"]) {
        token |= s["serviceAccountToken"]["audience"].as<std::string>("") == "istio-ca";
      }
    }
    EXPECT_TRUE(token) << "istiod's CA wants a token for audience istio-ca";
  }
}

INSTANTIATE_TEST_SUITE_P(Overlays, ManifestsTest, ::testing::ValuesIn(kOverlays),
                         [](const auto& info) {
                           std::string name = info.param.dir;
                           std::erase(name, '-');
                           return name;
                         });

// replace-istio takes Istio's DaemonSets over in place: same names, the same immutable selectors,
// labels, sockets and ports as Istio's charts, and Istio's istio-cni entry out of the chain.
TEST(ReplaceIstio, KeepsIstiosNamesSelectorsSocketsAndPorts) {
  if (kubectl_missing()) {
    if (is_ci()) FAIL() << "kubectl missing";
    GTEST_SKIP() << "kubectl missing (scripts/install-deps.sh installs it)";
  }
  const Rendered& replace = rendered(kRoot + "/overlays/replace-istio");
  ASSERT_EQ(replace.error, "");
  const YAML::Node ztunnel = find(replace.objects, "DaemonSet", "ztunnel");
  const YAML::Node cni = find(replace.objects, "DaemonSet", "istio-cni-node");
  ASSERT_TRUE(ztunnel.IsDefined());
  ASSERT_TRUE(cni.IsDefined());
  EXPECT_EQ(ztunnel["metadata"]["namespace"].as<std::string>(""), "istio-system");
  const YAML::Node zsel = ztunnel["spec"]["selector"]["matchLabels"];
  EXPECT_EQ(zsel.size(), 1u);
  EXPECT_EQ(zsel["app"].as<std::string>(""), "ztunnel");
  const YAML::Node csel = cni["spec"]["selector"]["matchLabels"];
  EXPECT_EQ(csel.size(), 1u);
  EXPECT_EQ(csel["k8s-app"].as<std::string>(""), "istio-cni-node");
  EXPECT_EQ(ztunnel["spec"]["template"]["metadata"]["labels"]["sidecar.istio.io/inject"].as<std::string>(""), "false");
  EXPECT_EQ(env_of(container_of(cni, "meshnode-agent")).at("MESHNODE_REPLACE_CNI_PLUGINS"), "istio-cni");
  // Base and replace-istio agree on every socket path and port.
  const Rendered& standalone = rendered(kRoot + "/overlays/standalone");
  ASSERT_EQ(standalone.error, "");
  const YAML::Node ours = container_of(daemonset_with(standalone.objects, "meshnode-agent"), "meshnode-agent");
  for (const char* name : {"ZTUNNEL_UDS_ADDRESS", "CNI_AGENT_RUN_DIR", "MONITORING_PORT"}) {
    EXPECT_EQ(env_of(container_of(cni, "meshnode-agent")).at(name), env_of(ours).at(name)) << name;
  }
}

TEST(Kustomize, BaseAndComponentsRenderOnTheirOwn) {
  if (kubectl_missing()) GTEST_SKIP() << "kubectl missing (scripts/install-deps.sh installs it)";
  EXPECT_EQ(render(kRoot + "/base").error, "");
  EXPECT_EQ(render(kRoot + "/namespace").error, "");
  // Every overlay directory is covered by the parameterized suite above.
  std::set<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(kRoot + "/overlays")) dirs.insert(e.path().filename());
  std::set<std::string> tested;
  for (const Overlay& o : kOverlays) tested.insert(o.dir);
  EXPECT_EQ(dirs, tested);
}

}  // namespace
}  // namespace meshnode::deploy
