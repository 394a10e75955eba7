// Two simulated nodes whose pods come through the real CNI chain, with the real meshnode-agent and
// meshnode-proxy on each (shared by integration_cni_test and integration_install_test).
#include "integration/cni_cluster.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "integration/cluster_fixture.hpp"

namespace meshnode::integration {
namespace {

constexpr auto kReady = seconds(60);
const std::string kSourceDir = MESHNODE_SOURCE_DIR;

std::string tail(const std::string& s) { return s.size() > 3000 ? s.substr(s.size() - 3000) : s; }

}  // namespace

bool is_ci() { return std::getenv("CI") != nullptr && std::string_view(std::getenv("CI")) == "true"; }

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

double gauge(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

std::unique_ptr<CniCluster> CniCluster::create(std::string& error, CniClusterOptions options) {
  std::unique_ptr<CniCluster> c(new CniCluster());
  c->options_ = std::move(options);
  c->prefix_ = random_prefix();
  c->workdir_ = (std::filesystem::temp_directory_path() / ("meshnode-cni-" + c->prefix_)).string();
  std::filesystem::create_directories(c->workdir_);
  if (!c->bring_up(error)) return nullptr;
  return c;
}

bool CniCluster::bring_up(std::string& error) {
  auto up = bash("cluster_up " + prefix_ + " 2 0 " + shell_quote(workdir_));
  if (up.exit_code != 0) {
    error = "cluster_up: " + up.describe();
    return false;
  }
  up_ = true;
  write_files();
  for (int n = 1; n <= 2; ++n) {
    std::filesystem::create_directories(node_dir(n));
    // With the install step the node holds only its primary CNI until the agent chains us in.
    const std::string setup = options_.install ? "cni_node_primary " + shell_quote(workdir_) + " " + std::to_string(n)
                                               : "cni_node_setup " + shell_quote(workdir_) + " " + std::to_string(n) +
                                                     " " + shell_quote(node_dir(n) + "/plugin.sock");
    if (auto r = bash(setup); r.exit_code != 0) {
      error = setup + ": " + r.describe();
      return false;
    }
    if (options_.start_daemons && (!start_agent(n, error) || !start_proxy(n, error))) return false;
  }
  return true;
}

CniCluster::~CniCluster() {
  try {
    for (auto& [n, p] : proxies_) p.terminate(seconds(5));
    for (auto& [n, p] : agents_) p.terminate(seconds(5));
    apps_.clear();
    if (std::filesystem::exists(workdir_ + "/podman")) {
      auto torn = bash("podman_teardown " + shell_quote(workdir_), seconds(120));
      if (torn.exit_code != 0) std::fprintf(stderr, "podman_teardown: %s\n", torn.describe().c_str());
    }
    if (up_) {
      auto down = bash("cluster_down " + prefix_);
      if (down.exit_code != 0) std::fprintf(stderr, "cluster_down: %s\n", down.describe().c_str());
    }
    if (std::getenv("MESHNODE_KEEP_WORKDIR") == nullptr) std::filesystem::remove_all(workdir_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "CniCluster teardown failed: %s\n", e.what());
  }
}

RunResult CniCluster::bash(const std::string& script, milliseconds timeout) const {
  std::string full = "set -e";
  for (const char* lib : {"common.sh", "cluster.sh", "cni.sh", "podman.sh"}) {
    full += "; source " + shell_quote(kSourceDir + "/scripts/lib/" + lib);
  }
  return run({"env", std::string("MESHNODE_CNI_BIN=") + MESHNODE_CNI_BIN, "bash", "-c", full + "; " + script}, timeout,
             workdir_);
}

bool CniCluster::start_agent(int n, std::string& error, const std::vector<std::string>& extra_env) {
  const std::string d = node_dir(n);
  agents_.erase(n);
  agent_log_index_[n]++;
  std::vector<std::string> argv = {"ip", "netns", "exec", node_netns(n), "env"};
  argv.insert(argv.end(), options_.agent_env.begin(), options_.agent_env.end());
  argv.insert(argv.end(), extra_env.begin(), extra_env.end());
  argv.insert(argv.end(), {MESHNODE_AGENT_BIN, "--plugin-socket", d + "/plugin.sock", "--zds-socket", d + "/zds.sock",
                           "--run-dir", d + "/run", "--policy", workdir_ + "/enrollment.yaml", "--log-level", "info"});
  if (options_.install) {
    argv.insert(argv.end(), {"--cni-net-dir", conf_dir(n), "--cni-bin-dir", bin_dir(n), "--cni-plugin-binary",
                             MESHNODE_CNI_BIN});
  }
  agents_.emplace(n, Process::spawn(argv, {.stdout_path = d + "/agent.out",
                                           .stderr_path = d + "/agent-" + std::to_string(agent_log_index_[n]) + ".log"}));
  return wait_ready(n, agents_.at(n), ":8000/readyz", "meshnode-agent", error);
}

std::optional<Process> CniCluster::spawn_proxy(int n, const ProxyPorts& ports, const std::vector<std::string>& env,
                                               std::string& error) {
  const std::string d = node_dir(n);
  proxy_log_index_[n]++;
  std::vector<std::string> argv = {"ip", "netns", "exec", node_netns(n), "env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {MESHNODE_PROXY_BIN, "--config", workdir_ + "/meshnode.yaml", "--ca-dir", workdir_ + "/ca",
                           "--inpod-uds", d + "/zds.sock", "--transparent-inbound", "--log-level", "info",
                           "--admin-addr", "127.0.0.1:" + std::to_string(ports.admin), "--metrics-addr",
                           "0.0.0.0:" + std::to_string(ports.metrics), "--readiness-addr",
                           "0.0.0.0:" + std::to_string(ports.readiness)});
  Process p = Process::spawn(argv, {.stdout_path = d + "/proxy.out",
                                    .stderr_path = d + "/proxy-" + std::to_string(proxy_log_index_[n]) + ".log"});
  if (!wait_ready(n, p, ":" + std::to_string(ports.readiness) + "/healthz/ready", "meshnode-proxy", error)) {
    return std::nullopt;
  }
  return p;
}

bool CniCluster::start_proxy(int n, std::string& error) {
  proxies_.erase(n);
  auto p = spawn_proxy(n, {}, options_.proxy_env, error);
  if (!p) return false;
  proxies_.emplace(n, std::move(*p));
  return true;
}

bool CniCluster::wait_ready(int n, Process& p, const std::string& path, const std::string& what, std::string& error) {
  const std::string url = "http://" + node_ip(n) + path;
  const bool ok = eventually(kReady, [&] {
    if (!p.running()) return true;
    return in_netns(node_netns(n), {"curl", "-fsS", "-m", "1", "-o", "/dev/null", url}, seconds(3)).exit_code == 0;
  });
  if (!ok || !p.running()) {
    const auto body = in_netns(node_netns(n), {"curl", "-sS", "-m", "1", url}, seconds(3));
    error = what + " on node" + std::to_string(n) + " not ready (" + body.out + "): " + p.stderr_text();
    return false;
  }
  return true;
}

RunResult CniCluster::add_pod(int n, const std::string& name, const std::string& ns, const std::string& env) {
  auto r = bash(env + "cni_pod_add " + shell_quote(workdir_) + " " + std::to_string(n) + " " + name + " " + ns);
  if (r.exit_code == 0) {
    pod_netns_[name] = prefix_ + "-n" + std::to_string(n) + "-" + name;
    pod_node_[name] = n;
  }
  return r;
}

RunResult CniCluster::del_chain(const std::string& name, const std::string& env) {
  return bash(env + "cni_chain " + shell_quote(workdir_) + " " + std::to_string(pod_node_.at(name)) + " DEL " +
              "\"$(cni_pod_get " + shell_quote(workdir_) + " " + name + " CONTAINERID)\" /var/run/netns/" +
              pod_netns_.at(name) + " \"$(cni_pod_get " + shell_quote(workdir_) + " " + name + " CNI_ARGS)\"");
}

RunResult CniCluster::check_chain(const std::string& name) {
  return bash("cni_chain " + shell_quote(workdir_) + " " + std::to_string(pod_node_.at(name)) + " CHECK " +
              "\"$(cni_pod_get " + shell_quote(workdir_) + " " + name + " CONTAINERID)\" /var/run/netns/" +
              pod_netns_.at(name) + " \"$(cni_pod_get " + shell_quote(workdir_) + " " + name + " CNI_ARGS)\"");
}

RunResult CniCluster::in_netns(const std::string& netns, const std::vector<std::string>& argv,
                               milliseconds timeout) const {
  std::vector<std::string> full = {"ip", "netns", "exec", netns};
  full.insert(full.end(), argv.begin(), argv.end());
  return run(full, timeout, workdir_);
}

RunResult CniCluster::in_pod(const std::string& pod, const std::vector<std::string>& argv, milliseconds timeout) const {
  return in_netns(pod_netns_.at(pod), argv, timeout);
}

Process CniCluster::start_in_pod(const std::string& pod, const std::vector<std::string>& argv, const std::string& label,
                                 bool stdin_pipe) const {
  std::vector<std::string> full = {"ip", "netns", "exec", pod_netns_.at(pod)};
  full.insert(full.end(), argv.begin(), argv.end());
  return Process::spawn(full, {.stdout_path = workdir_ + "/" + label + ".out",
                               .stderr_path = workdir_ + "/" + label + ".err",
                               .stdin_pipe = stdin_pipe});
}

Process& CniCluster::start_http(const std::string& pod, int port) {
  const std::string dir = workdir_ + "/www-" + pod;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/index.html") << "hello from the " << pod << " pod\n";
  apps_.push_back(
      start_in_pod(pod, {"python3", "-m", "http.server", std::to_string(port), "--directory", dir}, "http-" + pod));
  const std::string sport = "sport = :" + std::to_string(port);
  if (!eventually(seconds(20), [&] { return has(in_pod(pod, {"ss", "-ltnH", sport}).out, "LISTEN"); })) {
    throw std::runtime_error("http.server did not listen in " + pod);
  }
  return apps_.back();
}

Process& CniCluster::start_app(const std::string& pod, int port) {
  apps_.push_back(start_in_pod(pod,
                               {"python3", Cluster::tool("mn_server.py"), "--port", std::to_string(port), "--mode",
                                "observe"},
                               "app-" + pod + "-" + std::to_string(port)));
  if (!apps_.back().wait_for_line("\"ready\"", seconds(20))) {
    throw std::runtime_error("mn_server.py did not get ready in " + pod + ": " + apps_.back().stderr_text());
  }
  return apps_.back();
}

RunResult CniCluster::ping(const std::string& pod, const std::string& ip, int port) const {
  const std::string py =
      "import socket,sys\ns=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=5)\n"
      "s.sendall(b'ping\\n')\nd=b''\nwhile not d.endswith(b'\\n'):\n  c=s.recv(64)\n  if not c: break\n  d+=c\n"
      "print(d.decode().strip())\n";
  return in_pod(pod, {"python3", "-c", py, ip, std::to_string(port)}, seconds(15));
}

std::string CniCluster::node_metrics(int n, int port) const {
  auto r = in_netns(node_netns(n),
                    {"curl", "-sS", "-m", "5", "http://" + node_ip(n) + ":" + std::to_string(port) + "/metrics"},
                    seconds(10));
  return r.exit_code == 0 ? r.out : "";
}

int CniCluster::node_http_status(int n, int port, const std::string& path) const {
  auto r = in_netns(node_netns(n),
                    {"curl", "-sS", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}",
                     "http://" + node_ip(n) + ":" + std::to_string(port) + path},
                    seconds(5));
  return std::atoi(r.out.c_str());
}

std::set<std::string> CniCluster::listeners(const std::string& netns) const {
  std::set<std::string> ports;
  std::istringstream in(in_netns(netns, {"ss", "-ltnH"}).out);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* p : {":15001 ", ":15006 ", ":15008 "}) {
      if (has(line, p)) ports.insert(std::string(p + 1, 5));
    }
  }
  return ports;
}

std::string CniCluster::logs(int n) const {
  std::string out;
  const int agents = agent_log_index_.count(n) ? agent_log_index_.at(n) : 0;
  const int proxies = proxy_log_index_.count(n) ? proxy_log_index_.at(n) : 0;
  for (int i = 1; i <= agents; ++i) {
    out += "--- agent node" + std::to_string(n) + " #" + std::to_string(i) + "\n" +
           tail(read_file(node_dir(n) + "/agent-" + std::to_string(i) + ".log"));
  }
  for (int i = 1; i <= proxies; ++i) {
    out += "--- proxy node" + std::to_string(n) + " #" + std::to_string(i) + "\n" +
           tail(read_file(node_dir(n) + "/proxy-" + std::to_string(i) + ".log"));
  }
  return out;
}

void CniClusterTest::SetUp() {
  if (geteuid() != 0) {
    const std::string why = "integration tests need root (network namespaces); run scripts/test.sh as root";
    if (is_ci()) FAIL() << why << " (CI=true: skipping is a failure)";
    GTEST_SKIP() << why;
  }
  std::string error;
  cluster_ = CniCluster::create(error, cluster_options());
  ASSERT_NE(cluster_, nullptr) << error;
}

void CniClusterTest::TearDown() {
  if (HasFailure() && cluster_) std::fprintf(stderr, "%s%s", cluster_->logs(1).c_str(), cluster_->logs(2).c_str());
  cluster_.reset();
}

void CniClusterTest::add(int node, const std::string& pod, const std::string& ip, const std::string& ns) {
  auto r = c().add_pod(node, pod, ns);
  ASSERT_EQ(r.exit_code, 0) << "CNI ADD of " << pod << ": " << r.describe();
  ASSERT_EQ(r.out, ip + "\n") << pod;
}

void CniCluster::write_files() const {
  auto workload = [](const std::string& name, const std::string& ip, const std::string& node,
                     const std::string& uid = "") {
    return "- uid: " + (uid.empty() ? "cluster1//v1/Pod/default/" + name : uid) + "\n  name: " + name +
           "\n  namespace: default\n  serviceAccount: " + name + "\n  workloadIps: [\"" + ip +
           "\"]\n  protocol: HBONE\n  node: " + node + "\n";
  };
  std::ofstream(workdir_ + "/meshnode.yaml")
      << "workloads:\n"
      << workload("client", "198.19.1.10", "node1") << workload("client2", "198.19.1.11", "node1")
      << workload("server", "198.19.2.10", "node2") << workload("server2", "198.19.2.11", "node2")
      // podman: no K8S_POD_UID, so the agent's uid is "<namespace>/<name>" (meshnode-cni's
      // defaultPodNamespace "default", K8S_POD_NAME = the container name).
      << workload("podclient", "198.19.9.10", "node1", "default/podclient");
  std::ofstream(workdir_ + "/enrollment.yaml") << "enrollNamespaces: [default]\nexcludeNamespaces: [kube-system]\n";
}

}  // namespace meshnode::integration
