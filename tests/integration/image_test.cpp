// Issue 14: the container image, built by scripts/image.sh from the very binaries this build
// tested, runs meshnode-agent and meshnode-proxy on the simulated cluster the way the manifests
// say: command, args, env, capabilities, user, read-only root, seccomp and volumes come from the
// rendered standalone overlay, with host paths moved under the test's work dir. Each node's agent
// (from the image) installs meshnode-cni into the node's CNI dirs, pods come through that chain,
// and one connection crosses the nodes over HBONE between the two containerized proxies.
//
// podman 4.3 + runc (env-probe §6); every container sits in its node's netns (`--network
// ns:<node netns>`), the proxy too (in Kubernetes it has its own pod netns; ports don't clash
// here). Root only; without podman, runc, mmdebstrap or kubectl it skips visibly (fails with CI=true).
#include <algorithm>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "deploy/manifests.hpp"
#include "integration/cni_cluster.hpp"

namespace meshnode::integration {
namespace {

namespace fs = std::filesystem;
const std::string kSourceDir = MESHNODE_SOURCE_DIR;

std::string image_cache() {
  if (const char* dir = std::getenv("MESHNODE_IMAGE_CACHE")) return dir;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "/root") + "/.cache/meshnode/image";
}

/// Where the manifests' host paths and config objects land for one node of the test.
struct PodmanContext {
  int node = 0;
  std::string netns;                                     ///< the node's netns name
  std::map<std::string, std::string> host_paths;         ///< manifest hostPath -> path on this machine
  std::map<std::string, std::string> objects;            ///< ConfigMap/Secret name -> dir of its keys
  std::map<std::string, std::string> field_refs;         ///< downward API fieldPath -> value
  /// Container mount paths that must be the same path on the host (the plugin runs on the host and
  /// reaches the agent's socket by the path the agent wrote into the conflist); the env var that
  /// names them gets the host path.
  std::map<std::string, std::string> same_path_env;      ///< mount path -> env var
};

/// `podman run` arguments for `container` of DaemonSet `ds` as the manifests describe it.
/// @returns the arguments, or throws naming what the test does not know how to map.
std::vector<std::string> podman_run_args(const YAML::Node& ds, const YAML::Node& container, const PodmanContext& ctx,
                                         const std::string& name, const std::string& image) {
  std::vector<std::string> args = {"run", "-d", "--pull=never", "--name", name, "--network",
                                   "ns:/var/run/netns/" + ctx.netns};
  const YAML::Node sc = container["securityContext"];
  if (sc["privileged"].as<bool>(false)) throw std::runtime_error("privileged containers are not expected");
  for (const auto& cap : deploy::strings(sc["capabilities"]["drop"])) args.insert(args.end(), {"--cap-drop", cap});
  for (const auto& cap : deploy::strings(sc["capabilities"]["add"])) args.insert(args.end(), {"--cap-add", cap});
  // Kubernetes adds no tmpfs to a read-only root; podman would unless told not to.
  if (sc["readOnlyRootFilesystem"].as<bool>(false)) args.insert(args.end(), {"--read-only", "--read-only-tmpfs=false"});
  args.insert(args.end(), {"--user", std::to_string(sc["runAsUser"].as<int>(0)) + ":" +
                                         std::to_string(sc["runAsGroup"].as<int>(0))});
  if (!sc["allowPrivilegeEscalation"].as<bool>(true)) args.insert(args.end(), {"--security-opt", "no-new-privileges"});
  // RuntimeDefault is podman's default profile; unset means Unconfined in Kubernetes.
  if (sc["seccompProfile"]["type"].as<std::string>("Unconfined") != "RuntimeDefault") {
    args.insert(args.end(), {"--security-opt", "seccomp=unconfined"});
  }
  std::map<std::string, std::string> env;
  for (const YAML::Node& e : container["env"]) {
    const std::string key = e["name"].as<std::string>();
    if (e["value"]) {
      env[key] = e["value"].as<std::string>();
    } else if (e["valueFrom"]["fieldRef"]) {
      env[key] = ctx.field_refs.at(e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>());
    } else {
      throw std::runtime_error("env " + key + ": only values and fieldRefs are mapped");
    }
  }
  for (const deploy::Mount& m : deploy::mounts_of(ds, container)) {
    std::string host;
    if (m.kind == "hostPath") {
      auto it = ctx.host_paths.find(m.source);
      if (it == ctx.host_paths.end()) throw std::runtime_error("the test has no place for hostPath " + m.source);
      host = it->second;
      fs::create_directories(host);
    } else if (m.kind == "configMap" || m.kind == "secret") {
      host = ctx.objects.at(m.source);
    } else if (m.kind == "emptyDir") {
      args.insert(args.end(), {"--tmpfs", m.mount_path});
      continue;
    } else {
      throw std::runtime_error("volume " + m.name + " of kind '" + m.kind + "' is not mapped");
    }
    std::string target = m.mount_path;
    if (auto same = ctx.same_path_env.find(m.mount_path); same != ctx.same_path_env.end()) {
      target = host;
      env[same->second] = host;
    }
    std::string options = m.read_only ? "ro" : "rw";
    if (m.propagation == "HostToContainer") options += ",rslave";
    args.insert(args.end(), {"-v", host + ":" + target + ":" + options});
  }
  for (const auto& [key, value] : env) args.insert(args.end(), {"--env", key + "=" + value});
  args.push_back(image);
  for (const auto& a : deploy::strings(container["command"])) args.push_back(a);
  for (const auto& a : deploy::strings(container["args"])) args.push_back(a);
  return args;
}

/// Resident set size of a process in KiB (VmRSS), -1 when unknown.
long rss_kib(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

class ImageTest : public CniClusterTest {
 protected:
  CniClusterOptions cluster_options() const override { return {.install = true, .start_daemons = false}; }

  void SetUp() override {
    const bool tools = std::system("{ command -v podman && command -v runc && command -v mmdebstrap && "
                                   "command -v kubectl; } >/dev/null 2>&1") == 0;
    if (!tools) {
      const std::string why = "podman, runc, mmdebstrap or kubectl missing (scripts/install-deps.sh installs them)";
      if (is_ci()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    CniClusterTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // A store of its own (layers and the imported base stay between runs), next to image.sh's cache.
    const std::string store = image_cache() + "/podman-test";
    fs::create_directories(store);
    storage_conf_ = store + "/storage.conf";
    std::ofstream(storage_conf_) << "[storage]\ndriver = \"vfs\"\ngraphroot = \"" << store << "/root\"\nrunroot = \""
                                 << store << "/runroot\"\n";
    tag_ = "localhost/meshnode:test-" + c().prefix().substr(3);
  }

  void TearDown() override {
    if (HasFailure()) {
      for (const auto& name : containers_) {
        const auto logs = podman({"logs", name});
        std::fprintf(stderr, "--- podman logs %s\n%s\n", name.c_str(), tail_lines(logs.out + logs.err, 40).c_str());
      }
    }
    for (const auto& name : containers_) podman({"rm", "-f", "-t", "5", name}, seconds(30));
    if (!tag_.empty() && !storage_conf_.empty()) podman({"rmi", "-f", tag_}, seconds(30));
    CniClusterTest::TearDown();
  }

  /// podman with the test's store and image.sh's containers.conf (runc, rlimits, cgroupfs).
  RunResult podman(const std::vector<std::string>& args, milliseconds timeout = seconds(60)) const {
    std::vector<std::string> argv = {"env", "CONTAINERS_STORAGE_CONF=" + storage_conf_,
                                     "CONTAINERS_CONF=" + image_cache() + "/containers.conf", "podman"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, timeout, cluster_->workdir());
  }

  /// scripts/image.sh --binaries with this build's three binaries. @returns "" or the failure.
  std::string build_image() {
    const std::string bin = c().workdir() + "/image-bin";
    fs::create_directories(bin);
    for (const char* b : {MESHNODE_PROXY_BIN, MESHNODE_AGENT_BIN, MESHNODE_CNI_BIN}) {
      fs::copy_file(b, bin + "/" + fs::path(b).filename().string());
    }
    const std::string timings = c().workdir() + "/image-timings";
    auto r = run({"env", "CONTAINERS_STORAGE_CONF=" + storage_conf_, "MESHNODE_IMAGE_CACHE=" + image_cache(),
                  "MESHNODE_IMAGE_TIMINGS=" + timings, "bash", kSourceDir + "/scripts/image.sh", "--binaries", bin,
                  "--tag", tag_},
                 seconds(900), c().workdir());
    std::printf("image build steps (s):\n%s", read_file(timings).c_str());
    if (r.exit_code != 0) return "scripts/image.sh: " + r.describe();
    return "";
  }

  PodmanContext context(int n) const {
    const std::string d = c_const().node_dir(n);
    PodmanContext ctx;
    ctx.node = n;
    ctx.netns = c_const().node_netns(n);
    ctx.host_paths = {{"/etc/cni/net.d", c_const().conf_dir(n)},  {"/opt/cni/bin", c_const().bin_dir(n)},
                      {"/var/run/istio-cni", d + "/istio-cni"},   {"/var/run/ztunnel", d + "/ztunnel"},
                      {"/var/run/meshnode-agent", d + "/agent-run"}, {"/var/run/netns", "/var/run/netns"},
                      {"/proc", "/proc"}};
    ctx.objects = {{"meshnode-agent-config", c_const().workdir() + "/agent-config"},
                   {"meshnode-proxy-config", c_const().workdir() + "/proxy-config"},
                   {"meshnode-ca", c_const().workdir() + "/ca"}};
    ctx.field_refs = {{"spec.nodeName", "node" + std::to_string(n)},
                      {"metadata.name", "node" + std::to_string(n) + "-pod"},
                      {"metadata.namespace", "meshnode-system"},
                      {"status.podIP", c_const().node_ip(n)},
                      {"spec.serviceAccountName", "meshnode-proxy"}};
    ctx.same_path_env = {{"/var/run/istio-cni", "CNI_AGENT_RUN_DIR"}};
    return ctx;
  }
  const CniCluster& c_const() const { return *cluster_; }

  /// Starts one container of the manifests on node n and waits for `port``path` to answer 200.
  /// `policy_dir`: mounted at /etc/meshnode-test and the agent pointed at its enrollment.yaml (the
  /// agent's no-Kubernetes mode: the manifests run it against the API server, which cannot run here).
  void start(int n, const YAML::Node& ds, const std::string& container, int port, const std::string& path,
             const std::string& policy_dir = "") {
    const std::string name = c().prefix() + "-" + container + std::to_string(n);
    auto args = podman_run_args(ds, deploy::container_of(ds, container), context(n), name, tag_);
    if (!policy_dir.empty()) {
      auto image = std::find(args.begin(), args.end(), tag_);
      args.insert(image, {"-v", policy_dir + ":/etc/meshnode-test:ro"});
      args.push_back("--policy=/etc/meshnode-test/enrollment.yaml");
    }
    containers_.push_back(name);
    auto r = podman(args, seconds(120));
    ASSERT_EQ(r.exit_code, 0) << "podman " << [&] {
      std::string s;
      for (const auto& a : args) s += a + " ";
      return s;
    }() << "\n" << r.describe();
    const bool ready = eventually(seconds(60), [&] { return c().node_http_status(n, port, path) == 200; });
    ASSERT_TRUE(ready) << container << " on node" << n << " not ready: "
                       << tail_lines(podman({"logs", name}).err, 30);
  }

  /// The RSS of a container's process in KiB.
  long container_rss(const std::string& name) {
    const std::string pid = podman({"inspect", "--format", "{{.State.Pid}}", name}).out;
    return rss_kib(pid.substr(0, pid.find('\n')));
  }

  std::string storage_conf_;
  std::string tag_;
  std::vector<std::string> containers_;
};

TEST_F(ImageTest, AgentAndProxyFromTheImageInstallThePluginAndCarryOneConnectionOverHbone) {
  ASSERT_EQ(build_image(), "");
  // The image carries the binaries this build tested, byte for byte.
  auto mounted = podman({"image", "mount", tag_});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.describe();
  const std::string root = mounted.out.substr(0, mounted.out.find('\n'));
  for (const char* b : {MESHNODE_PROXY_BIN, MESHNODE_AGENT_BIN, MESHNODE_CNI_BIN}) {
    EXPECT_TRUE(read_file(root + "/usr/local/bin/" + fs::path(b).filename().string()) == read_file(b)) << b;
  }
  podman({"image", "umount", tag_});
  const std::string size = podman({"image", "inspect", "--format", "{{.Size}}", tag_}).out;
  std::printf("image %s: %.1f MB\n", tag_.c_str(), std::strtod(size.c_str(), nullptr) / 1e6);
  RecordProperty("image_bytes", size.substr(0, size.find('\n')));

  // The objects the containers read: the overlay's ConfigMaps hold this cluster's config, and the
  // CA Secret comes from the script the README gives.
  auto rendered = deploy::render(kSourceDir + "/deploy/kubernetes/overlays/standalone");
  ASSERT_EQ(rendered.error, "");
  const YAML::Node agent = deploy::daemonset_with(rendered.objects, "meshnode-agent");
  const YAML::Node proxy = deploy::daemonset_with(rendered.objects, "meshnode-proxy");
  ASSERT_TRUE(agent.IsDefined() && proxy.IsDefined());
  for (const char* dir : {"agent-config", "proxy-config"}) fs::create_directories(c().workdir() + "/" + dir);
  fs::copy_file(c().workdir() + "/enrollment.yaml", c().workdir() + "/agent-config/enrollment.yaml");
  fs::copy_file(c().workdir() + "/meshnode.yaml", c().workdir() + "/proxy-config/config.yaml");
  auto ca = run({"bash", kSourceDir + "/scripts/make-ca.sh", c().workdir() + "/ca"}, seconds(30), c().workdir());
  ASSERT_EQ(ca.exit_code, 0) << ca.describe();

  for (int n : {1, 2}) {
    ASSERT_NO_FATAL_FAILURE(start(n, agent, "meshnode-agent", 8000, "/readyz", c().workdir() + "/agent-config"));
    ASSERT_NO_FATAL_FAILURE(start(n, proxy, "meshnode-proxy", 15021, "/healthz/ready"));
    // The agent in the image put the plugin on the node and chained it.
    EXPECT_TRUE(has(read_file(c().conf_dir(n) + "/10-bridge.conflist"), "\"type\": \"meshnode-cni\""));
    EXPECT_TRUE(read_file(c().bin_dir(n) + "/meshnode-cni") == read_file(MESHNODE_CNI_BIN));
  }
  add(1, "client", "198.19.1.10");
  add(2, "server", "198.19.2.10");
  c().start_app("server", 8080);
  auto r = c().ping("client", "198.19.2.10", 8080);
  ASSERT_EQ(r.out, "OK\n") << r.describe();
  const std::vector<std::string> labels = {"reporter=\"destination\"",
                                           "source_principal=\"spiffe://cluster.local/ns/default/sa/client\"",
                                           "destination_principal=\"spiffe://cluster.local/ns/default/sa/server\"",
                                           "connection_security_policy=\"mutual_tls\""};
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return metric_sum(c().node_metrics(2, 15020), "istio_tcp_connections_opened_total", labels) >= 1;
  })) << c().node_metrics(2, 15020);

  for (const auto& name : containers_) {
    const long kib = container_rss(name);
    std::printf("RSS %s: %.1f MB\n", name.c_str(), static_cast<double>(kib) / 1024);
    RecordProperty("rss_kib_" + name.substr(c().prefix().size() + 1), std::to_string(kib));
    EXPECT_GT(kib, 0);
  }
}

}  // namespace
}  // namespace meshnode::integration
