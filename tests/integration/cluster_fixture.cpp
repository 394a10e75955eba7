#include "integration/cluster_fixture.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#ifndef MESHNODE_PROXY_BIN
#error "MESHNODE_PROXY_BIN must name the meshnode-proxy binary"
#endif
#ifndef MESHNODE_SOURCE_DIR
#error "MESHNODE_SOURCE_DIR must name the repository root"
#endif

namespace meshnode::integration {
namespace {

constexpr auto kReadyTimeout = std::chrono::seconds(60);  // generous: ASan builds start slowly




}  // namespace


std::string Cluster::tool(std::string_view name) {
  return std::string(MESHNODE_SOURCE_DIR) + "/tests/integration/tools/" + std::string(name);
}

std::unique_ptr<Cluster> Cluster::create(const ClusterOptions& options, std::string& error) {
  std::unique_ptr<Cluster> c(new Cluster());  // private constructor: make_unique cannot reach it
  if (!c->bring_up(options, error)) return nullptr;  // the destructor removes what was created
  return c;
}

bool Cluster::bring_up(const ClusterOptions& options, std::string& error) {
  char tmpl[] = "/tmp/meshnode-it.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    error = "mkdtemp failed";
    return false;
  }
  workdir_ = tmpl;
  prefix_ = random_prefix();
  cluster_up_ = true;  // from here on, tear_down() runs `cluster.sh down` even after a partial up
  const auto up = local({"bash", std::string(MESHNODE_SOURCE_DIR) + "/scripts/cluster.sh", "up", "--prefix",
                         prefix_, "--workdir", workdir_},
                        seconds(60));
  if (up.exit_code != 0) {
    error = "scripts/cluster.sh up failed: " + up.describe();
    return false;
  }
  env_ = parse_env(read_file(workdir_ + "/cluster.env"));
  for (int n = 1; n <= 2; ++n) {
    node_netns_[n] = env_["MN_NODE" + std::to_string(n) + "_NETNS"];
    node_ip_[n] = env_["MN_NODE" + std::to_string(n) + "_IP"];
  }
  auto add_pod = [&](std::string name, int node, int index, bool hbone) {
    const std::string key = "MN_POD_" + std::to_string(node) + "_" + std::to_string(index);
    pods_.push_back({.name = name, .service_account = name, .netns = env_[key + "_NETNS"],
                     .ip = env_[key + "_IP"], .node = node, .hbone = hbone});
  };
  add_pod("client", 1, 0, true);
  add_pod("client2", 1, 1, true);
  add_pod("server", 2, 0, true);
  add_pod("legacy", 2, 1, false);
  for (const auto& p : pods_) {
    if (p.netns.empty() || p.ip.empty()) {
      error = "cluster.env lacks pod " + p.name + ":\n" + read_file(workdir_ + "/cluster.env");
      return false;
    }
  }
  write_config(1, options);
  write_config(2, options);
  // Sequential start: the first proxy creates the shared root CA, the second one loads it.
  return start_proxy(1, error) && start_proxy(2, error);
}

void Cluster::write_config(int node, const ClusterOptions& options) const {
  std::ofstream out(config_path(node));
  if (options.config_yaml) {
    out << options.config_yaml(*this, node);
    return;
  }
  out << "workloads:\n";
  for (const auto& p : pods_) {
    const std::string sa = (p.name == "server" && node == 2) ? options.server_sa_on_node2 : p.service_account;
    out << "- uid: " << p.uid() << "\n"
        << "  name: " << p.name << "\n"
        << "  namespace: default\n"
        << "  serviceAccount: " << sa << "\n"
        << "  workloadIps: [\"" << p.ip << "\"]\n"
        << "  protocol: " << (p.hbone ? "HBONE" : "TCP") << "\n"
        << "  node: node" << p.node << "\n";
  }
  out << "services: []\npolicies: []\n";
}

bool Cluster::start_proxy(int node, std::string& error) {
  const std::string n = std::to_string(node);
  std::vector<std::string> argv = {"ip", "netns", "exec", node_netns_.at(node), MESHNODE_PROXY_BIN,
                                   "--config", config_path(node), "--ca-dir", ca_dir(),
                                   "--log-level", "info"};
  for (const auto& p : pods_) {
    if (p.node == node) {
      argv.push_back("--pod");
      argv.push_back(p.uid() + "=/var/run/netns/" + p.netns);
    }
  }
  proxies_[node] = Process::spawn(argv, {.stdout_path = workdir_ + "/proxy-node" + n + ".out",
                                         .stderr_path = workdir_ + "/proxy-node" + n + ".log"});
  const std::string url = "http://" + node_ip_.at(node) + ":15021/healthz/ready";
  bool died = false;
  const bool ready = eventually(kReadyTimeout, [&] {
    if (!proxies_[node].running()) {
      died = true;
      return true;
    }
    return in_node(node, {"curl", "-fsS", "-m", "1", "-o", "/dev/null", url}, seconds(5)).exit_code == 0;
  });
  if (!ready || died) {
    error = "meshnode-proxy on node" + n + (died ? " exited during start-up" : " not ready within 60 s") +
            " (" + url + "); its log:\n" + tail_lines(proxy_log(node), 40);
    return false;
  }
  return true;
}

Cluster::~Cluster() { tear_down(); }

void Cluster::tear_down() noexcept {
  try {
    for (auto& [node, proxy] : proxies_) proxy.terminate(seconds(10));
    proxies_.clear();
    if (cluster_up_) {
      local({"bash", std::string(MESHNODE_SOURCE_DIR) + "/scripts/cluster.sh", "down", "--prefix", prefix_},
            seconds(60));
      cluster_up_ = false;
    }
    if (!workdir_.empty() && std::getenv("MESHNODE_KEEP_WORKDIR") == nullptr) {
      std::filesystem::remove_all(workdir_);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster teardown failed: %s\n", e.what());
  }
}

const Pod& Cluster::pod(std::string_view name) const {
  for (const auto& p : pods_) {
    if (p.name == name) return p;
  }
  throw std::out_of_range("no pod " + std::string(name));
}

RunResult Cluster::local(const std::vector<std::string>& argv, milliseconds timeout) const {
  return run(argv, timeout, workdir_);
}

RunResult Cluster::in_pod(std::string_view name, const std::vector<std::string>& argv,
                          milliseconds timeout) const {
  std::vector<std::string> full = {"ip", "netns", "exec", pod(name).netns};
  full.insert(full.end(), argv.begin(), argv.end());
  return local(full, timeout);
}

RunResult Cluster::in_node(int node, const std::vector<std::string>& argv, milliseconds timeout) const {
  std::vector<std::string> full = {"ip", "netns", "exec", node_netns_.at(node)};
  full.insert(full.end(), argv.begin(), argv.end());
  return local(full, timeout);
}

Process Cluster::start_in_pod(std::string_view name, const std::vector<std::string>& argv,
                              const std::string& label, bool stdin_pipe) const {
  std::vector<std::string> full = {"ip", "netns", "exec", pod(name).netns};
  full.insert(full.end(), argv.begin(), argv.end());
  return Process::spawn(full, {.stdout_path = workdir_ + "/" + label + ".out",
                               .stderr_path = workdir_ + "/" + label + ".err",
                               .stdin_pipe = stdin_pipe});
}

Process Cluster::start_app(std::string_view name, int port, const std::string& mode) const {
  Process p = start_in_pod(name, {"python3", tool("mn_server.py"), "--port", std::to_string(port), "--mode", mode},
                           "app-" + std::string(name) + "-" + std::to_string(port));
  if (!p.wait_for_line("\"ready\"", seconds(20))) {
    throw std::runtime_error("mn_server.py did not get ready in pod " + std::string(name) + ": " +
                             p.stderr_text());
  }
  return p;
}

std::string Cluster::metrics(int node) const {
  auto r = in_node(node, {"curl", "-sS", "-m", "5", "http://" + node_ip_.at(node) + ":15020/metrics"}, seconds(10));
  return r.exit_code == 0 ? r.out : "";
}

pid_t Cluster::proxy_pid(int node) const {
  auto it = proxies_.find(node);
  return it == proxies_.end() ? 0 : it->second.pid();
}

std::string Cluster::proxy_log(int node) const {
  return read_file(workdir_ + "/proxy-node" + std::to_string(node) + ".log");
}

void ClusterTest::start_cluster(const ClusterOptions& options) {
  skip_reason_.clear();
  setup_error_.clear();
  const bool ci = std::getenv("CI") != nullptr && std::string_view(std::getenv("CI")) == "true";
  if (geteuid() != 0) {
    const std::string why = "integration tests need root (network namespaces); run scripts/test.sh as root";
    (ci ? setup_error_ : skip_reason_) = why + (ci ? " (CI=true: skipping is a failure)" : "");
    return;
  }
  std::string error;
  try {
    cluster_ = Cluster::create(options, error);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!cluster_) setup_error_ = "cluster set-up failed: " + error;
}

void ClusterTest::SetUp() {
  if (!setup_error_.empty()) FAIL() << setup_error_;
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  ASSERT_NE(cluster_, nullptr);
}

void ClusterTest::TearDown() {
  if (HasFailure() && cluster_) {
    for (int node : {1, 2}) {
      std::printf("\n--- meshnode-proxy node%d log (last 60 lines) ---\n%s\n", node,
                  tail_lines(cluster_->proxy_log(node), 60).c_str());
    }
  }
}

}  // namespace meshnode::integration
