#include "integration/zds_fixture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#ifndef MESHNODE_PROXY_BIN
#error "MESHNODE_PROXY_BIN must name the meshnode-proxy binary"
#endif
#ifndef MESHNODE_SOURCE_DIR
#error "MESHNODE_SOURCE_DIR must name the repository root"
#endif

namespace meshnode::integration {
namespace {


std::string tool(std::string_view name) {
  return std::string(MESHNODE_SOURCE_DIR) + "/tests/integration/tools/" + std::string(name);
}



}  // namespace

nodeapi::zds::WorkloadInfo ZdsPod::info() const {
  nodeapi::zds::WorkloadInfo info;
  info.set_name(name);
  info.set_namespace_("default");
  info.set_service_account(name);
  return info;
}

std::unique_ptr<ZdsCluster> ZdsCluster::create(int pods_per_node, std::string& error,
                                               const std::set<std::string>& not_in_config) {
  std::unique_ptr<ZdsCluster> c(new ZdsCluster());
  if (!c->bring_up(pods_per_node, error, not_in_config)) return nullptr;  // the destructor removes what exists
  return c;
}

bool ZdsCluster::bring_up(int pods_per_node, std::string& error, const std::set<std::string>& not_in_config) {
  char tmpl[] = "/tmp/meshnode-zds.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    error = "mkdtemp failed";
    return false;
  }
  workdir_ = tmpl;
  prefix_ = random_prefix();
  cluster_up_ = true;
  const auto up = run({"bash", std::string(MESHNODE_SOURCE_DIR) + "/scripts/cluster.sh", "up", "--prefix", prefix_,
                       "--pods", std::to_string(pods_per_node), "--workdir", workdir_},
                      seconds(90), workdir_);
  if (up.exit_code != 0) {
    error = "scripts/cluster.sh up failed: " + up.describe();
    return false;
  }
  auto env = parse_env(read_file(workdir_ + "/cluster.env"));
  std::ofstream config(workdir_ + "/config.yaml");
  config << "workloads:\n";
  for (int n = 1; n <= 2; ++n) {
    node_netns_[n] = env["MN_NODE" + std::to_string(n) + "_NETNS"];
    node_ip_[n] = env["MN_NODE" + std::to_string(n) + "_IP"];
    for (int i = 0; i < pods_per_node; ++i) {
      const std::string key = "MN_POD_" + std::to_string(n) + "_" + std::to_string(i);
      auto pod = std::make_unique<ZdsPod>();
      pod->name = "n" + std::to_string(n) + "p" + std::to_string(i);
      pod->netns = env[key + "_NETNS"];
      pod->ip = env[key + "_IP"];
      pod->node = n;
      if (pod->netns.empty() || pod->ip.empty()) {
        error = "cluster.env lacks " + key + ":\n" + read_file(workdir_ + "/cluster.env");
        return false;
      }
      pod->fd = base::UniqueFd(::open(("/var/run/netns/" + pod->netns).c_str(), O_RDONLY | O_CLOEXEC));
      if (!pod->fd.valid()) {
        error = "cannot open /var/run/netns/" + pod->netns;
        return false;
      }
      if (not_in_config.contains(pod->name)) {
        pods_.push_back(std::move(pod));
        continue;
      }
      config << "- uid: " << pod->uid() << "\n"
             << "  name: " << pod->name << "\n"
             << "  namespace: default\n"
             << "  serviceAccount: " << pod->name << "\n"
             << "  workloadIps: [\"" << pod->ip << "\"]\n"
             << "  protocol: HBONE\n"
             << "  node: node" << n << "\n";
      pods_.push_back(std::move(pod));
    }
  }
  config << "services: []\npolicies: []\n";
  return true;
}

ZdsCluster::~ZdsCluster() { tear_down(); }

void ZdsCluster::tear_down() noexcept {
  try {
    pods_.clear();  // close the netns fds first
    if (cluster_up_) {
      // cluster.sh down also stops processes still running in the namespaces (proxies, peers).
      run({"bash", std::string(MESHNODE_SOURCE_DIR) + "/scripts/cluster.sh", "down", "--prefix", prefix_},
          seconds(60), workdir_);
      cluster_up_ = false;
    }
    if (!workdir_.empty() && std::getenv("MESHNODE_KEEP_WORKDIR") == nullptr) std::filesystem::remove_all(workdir_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zds cluster teardown failed: %s\n", e.what());
  }
}

ZdsPod& ZdsCluster::pod(int node, int index) {
  for (auto& p : pods_) {
    if (p->node == node && p->name == "n" + std::to_string(node) + "p" + std::to_string(index)) return *p;
  }
  throw std::out_of_range("no pod " + std::to_string(node) + "/" + std::to_string(index));
}

std::string ZdsCluster::zds_path(int node) const { return workdir_ + "/zds-node" + std::to_string(node) + ".sock"; }

Process ZdsCluster::start_proxy(int node, const std::string& label, ProxyPorts ports,
                                const std::vector<std::string>& env, bool local_config) const {
  std::vector<std::string> argv = {"ip", "netns", "exec", node_netns_.at(node), "env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(MESHNODE_PROXY_BIN);
  if (local_config) argv.insert(argv.end(), {"--config", workdir_ + "/config.yaml", "--ca-dir", workdir_ + "/ca"});
  argv.insert(argv.end(), {"--inpod-uds", zds_path(node), "--log-level", "info", "--admin-addr",
                           "127.0.0.1:" + std::to_string(ports.admin), "--metrics-addr",
                           "0.0.0.0:" + std::to_string(ports.metrics), "--readiness-addr",
                           "0.0.0.0:" + std::to_string(ports.readiness)});
  return Process::spawn(argv, {.stdout_path = workdir_ + "/" + label + ".out", .stderr_path = workdir_ + "/" + label + ".log"});
}

int ZdsCluster::readiness(int node, ProxyPorts ports) const {
  auto r = in_netns(node_netns_.at(node),
                    {"curl", "-sS", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}",
                     "http://" + node_ip_.at(node) + ":" + std::to_string(ports.readiness) + "/healthz/ready"},
                    seconds(5));
  return std::atoi(r.out.c_str());
}

std::string ZdsCluster::metrics(int node, ProxyPorts ports) const {
  auto r = in_netns(node_netns_.at(node),
                    {"curl", "-sS", "-m", "5", "http://" + node_ip_.at(node) + ":" + std::to_string(ports.metrics) + "/metrics"},
                    seconds(10));
  return r.exit_code == 0 ? r.out : "";
}

std::set<int> ZdsCluster::listening_ports(const std::string& netns) const {
  std::set<int> ports;
  auto r = in_netns(netns, {"ss", "-Hltn"}, seconds(10));
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    // State Recv-Q Send-Q Local:Port Peer:Port
    std::istringstream fields(line);
    std::string state, recvq, sendq, local;
    if (!(fields >> state >> recvq >> sendq >> local)) continue;
    if (auto colon = local.rfind(':'); colon != std::string::npos) ports.insert(std::atoi(local.c_str() + colon + 1));
  }
  return ports;
}

RunResult ZdsCluster::in_netns(const std::string& netns, const std::vector<std::string>& argv,
                               milliseconds timeout) const {
  std::vector<std::string> full = {"ip", "netns", "exec", netns};
  full.insert(full.end(), argv.begin(), argv.end());
  return run(full, timeout, workdir_);
}

Process ZdsCluster::start_in_netns(const std::string& netns, const std::vector<std::string>& argv,
                                   const std::string& label, bool stdin_pipe) const {
  std::vector<std::string> full = {"ip", "netns", "exec", netns};
  full.insert(full.end(), argv.begin(), argv.end());
  return Process::spawn(full, {.stdout_path = workdir_ + "/" + label + ".out",
                               .stderr_path = workdir_ + "/" + label + ".err",
                               .stdin_pipe = stdin_pipe});
}

Process ZdsCluster::start_echo_server(const ZdsPod& pod, int port) const {
  Process p = start_in_netns(pod.netns, {"python3", tool("zds_peer.py"), "server", "--port", std::to_string(port)},
                             "echo-" + pod.name + "-" + std::to_string(port));
  if (!p.wait_for_line("\"ready\"", seconds(20))) {
    throw std::runtime_error("zds_peer.py server did not get ready in " + pod.name + ": " + p.stderr_text());
  }
  return p;
}

Process ZdsCluster::start_hold(const ZdsPod& from, const ZdsPod& to, int port, const std::string& label) const {
  Process p = start_in_netns(from.netns, {"python3", tool("zds_peer.py"), "hold", "--host", to.ip, "--port",
                                          std::to_string(port), "--interval", "0.1", "--timeout", "5"},
                             label);
  if (!p.wait_for_line("\"open\"", seconds(20))) {
    throw std::runtime_error("held connection " + label + " did not open: " + p.stdout_text() + p.stderr_text());
  }
  return p;
}

RunResult ZdsCluster::round_trip(const ZdsPod& from, const ZdsPod& to, int port) const {
  return in_netns(from.netns, {"python3", tool("zds_peer.py"), "loop", "--count", "1", "--host", to.ip, "--port",
                               std::to_string(port), "--timeout", "5"},
                  seconds(20));
}

std::string replay_snapshot(fakes::ZdsServer& agent, const std::vector<ZdsPod*>& pods, std::chrono::seconds within) {
  const auto deadline = fakes::in(within);
  if (auto ok = agent.accept_client(deadline); !ok) return "accept: " + ok.error().message();
  if (auto ok = agent.expect_hello(deadline); !ok) return "hello: " + ok.error().message();
  for (auto* pod : pods) {
    if (auto ok = agent.add(pod->uid(), pod->info(), pod->fd.get()); !ok) return "add " + pod->name + ": " + ok.error().message();
    auto ack = agent.read_ack(deadline);
    if (!ack) return "ack of add " + pod->name + ": " + ack.error().message();
    if (!ack->empty()) return "add " + pod->name + " acked with error: " + *ack;
  }
  if (auto ok = agent.snapshot_sent(); !ok) return "snapshot_sent: " + ok.error().message();
  auto ack = agent.read_ack(deadline);
  if (!ack) return "ack of snapshot_sent: " + ack.error().message();
  if (!ack->empty()) return "snapshot_sent acked with error: " + *ack;
  return "";
}


void ZdsClusterTest::SetUp() {
  const bool ci = std::getenv("CI") != nullptr && std::string_view(std::getenv("CI")) == "true";
  if (geteuid() != 0) {
    if (ci) FAIL() << "integration tests need root (network namespaces); CI=true: skipping is a failure";
    GTEST_SKIP() << "integration tests need root (network namespaces); run scripts/test.sh as root";
  }
  std::string error;
  try {
    cluster_ = ZdsCluster::create(pods_per_node(), error, pods_not_in_config());
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_NE(cluster_, nullptr) << "cluster set-up failed: " << error;
}

void ZdsClusterTest::TearDown() {
  if (HasFailure() && cluster_) {
    for (const auto& entry : std::filesystem::directory_iterator(cluster_->workdir())) {
      const auto name = entry.path().filename().string();
      if (!name.ends_with(".log") && !name.ends_with(".err")) continue;
      const auto text = read_file(entry.path());
      if (text.empty()) continue;
      std::printf("\n--- %s (last 40 lines) ---\n%s", name.c_str(), tail_lines(text, 40).c_str());
    }
  }
  cluster_.reset();
}

}  // namespace meshnode::integration
