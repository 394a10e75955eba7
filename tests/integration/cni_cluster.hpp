#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "integration/process.hpp"
#include "integration/test_util.hpp"

namespace meshnode::integration {

/// True when CI=true: root-only tests fail instead of skipping.
bool is_ci();

/// `'s'` with single quotes escaped for bash.
std::string shell_quote(const std::string& s);

/// Whether `text` contains `needle`.
inline bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

/// Value of an unlabeled Prometheus series `name value` (-1 when absent).
double gauge(const std::string& text, const std::string& name);

/// How a CniCluster is set up.
struct CniClusterOptions {
  /// false: each node gets a ready-made conflist chaining meshnode-cni (cni_node_setup).
  /// true: each node starts with only its primary CNI (cni_node_primary) and meshnode-agent's
  /// install step copies meshnode-cni into the node's bin dir and chains it (issue 14); pods then
  /// run whatever the node's conf dir holds, exactly as a runtime would.
  bool install = false;
  /// false: no agent or proxy is started (the image test runs them from the image).
  bool start_daemons = true;
  /// Extra environment ("NAME=value") of every agent, e.g. AMBIENT_DISABLE_SAFE_UPGRADE=true.
  std::vector<std::string> agent_env;
  /// Extra environment of every proxy started by start_proxy, e.g. CONNECTION_TERMINATION_DEADLINE=2s.
  std::vector<std::string> proxy_env;
};

/// Two nodes, each with meshnode-agent + meshnode-proxy (shared mode, ZDS, --transparent-inbound);
/// pods only through the node's CNI chain (scripts/lib/cni.sh) with the real meshnode-cni.
/// Workloads of the proxies' --config (identity and protocol by uid cluster1//v1/Pod/default/<name>):
/// node1 client 198.19.1.10, client2 .11; node2 server 198.19.2.10, server2 .11 — host-local hands
/// out each node's range from .10 in creation order, and add_pod checks the address it got.
/// The destructor stops every process and removes the namespaces and the work dir. Not thread-safe.
class CniCluster {
 public:
  /// @returns the cluster with both agents and proxies ready, or nullptr and `error` naming the step.
  static std::unique_ptr<CniCluster> create(std::string& error, CniClusterOptions options = {});
  ~CniCluster();
  CniCluster(const CniCluster&) = delete;
  CniCluster& operator=(const CniCluster&) = delete;

  /// Runs a bash snippet with common.sh, cluster.sh, cni.sh and podman.sh sourced and
  /// MESHNODE_CNI_BIN set.
  RunResult bash(const std::string& script, milliseconds timeout = seconds(60)) const;

  /// (Re)starts node n's agent (the old Process, if any, must have exited) with the cluster's
  /// options plus `extra_env`, and waits for its /readyz (with install: chained). Its stderr is
  /// <node dir>/agent-<k>.log.
  bool start_agent(int n, std::string& error, const std::vector<std::string>& extra_env = {});
  /// (Re)starts node n's proxy on the default ports and waits for its readiness.
  bool start_proxy(int n, std::string& error);
  /// Starts one more proxy on node n (a rollout's new proxy) on `ports`, without replacing
  /// proxy(n); waits for its readiness. nullopt + `error` when it did not get ready.
  std::optional<Process> spawn_proxy(int n, const ProxyPorts& ports, const std::vector<std::string>& env,
                                     std::string& error);
  /// Makes `p` node n's proxy (the old one must have exited).
  void set_proxy(int n, Process p) { proxies_.insert_or_assign(n, std::move(p)); }

  Process& agent(int n) { return agents_.at(n); }
  Process& proxy(int n) { return proxies_.at(n); }

  /// cni_pod_add: @returns the run (stdout = the pod IP, or the CNI error on failure).
  RunResult add_pod(int n, const std::string& name, const std::string& ns = "default", const std::string& env = "");
  /// The chain's DEL only (netns kept, as a runtime does before removing the sandbox). `env` is
  /// prepended to the bash command (e.g. "MN_CNI_CONFLIST=<old chain> ").
  RunResult del_chain(const std::string& name, const std::string& env = "");
  RunResult check_chain(const std::string& name);

  RunResult in_netns(const std::string& netns, const std::vector<std::string>& argv,
                     milliseconds timeout = seconds(30)) const;
  RunResult in_pod(const std::string& pod, const std::vector<std::string>& argv,
                   milliseconds timeout = seconds(30)) const;
  Process start_in_pod(const std::string& pod, const std::vector<std::string>& argv, const std::string& label,
                       bool stdin_pipe = false) const;
  /// python3 -m http.server on `port` in `pod` serving "hello from the <pod> pod\n"; its access
  /// log (one line per request, starting with the peer's IP) is <workdir>/http-<pod>.err.
  Process& start_http(const std::string& pod, int port);
  /// tools/mn_server.py `observe` on `port` in `pod`, kept until the cluster goes.
  Process& start_app(const std::string& pod, int port);
  /// One connection client pod → ip:port through mn_loop's protocol ("ping" → "OK").
  RunResult ping(const std::string& pod, const std::string& ip, int port) const;

  /// GET http://<node ip>:<port>/metrics inside the node netns ("" on failure).
  std::string node_metrics(int n, int port) const;
  /// HTTP status of GET http://<node ip>:<port><path> inside the node netns (0 if unreachable).
  int node_http_status(int n, int port, const std::string& path) const;
  std::string nft_ruleset(const std::string& netns) const { return in_netns(netns, {"nft", "list", "ruleset"}).out; }
  /// Ports among 15001/15006/15008 listening inside `netns`.
  std::set<std::string> listeners(const std::string& netns) const;
  std::string ip_rules(const std::string& netns) const { return in_netns(netns, {"ip", "rule", "list"}).out; }

  [[nodiscard]] const std::string& workdir() const { return workdir_; }
  [[nodiscard]] const std::string& prefix() const { return prefix_; }
  [[nodiscard]] std::string node_netns(int n) const { return prefix_ + "-node" + std::to_string(n); }
  [[nodiscard]] std::string node_ip(int n) const { return "198.18.0." + std::to_string(n); }
  [[nodiscard]] std::string node_dir(int n) const { return workdir_ + "/node" + std::to_string(n); }
  /// The node's CNI conf dir and bin dir (install mode: what the agent's install step manages).
  [[nodiscard]] std::string conf_dir(int n) const { return workdir_ + "/cni/node" + std::to_string(n) + "/net.d"; }
  [[nodiscard]] std::string bin_dir(int n) const { return workdir_ + "/cni/node" + std::to_string(n) + "/bin"; }
  [[nodiscard]] const std::string& pod_netns(const std::string& pod) const { return pod_netns_.at(pod); }
  /// The tails of every agent and proxy log of node n (for failure messages).
  [[nodiscard]] std::string logs(int n) const;

 private:
  CniCluster() = default;
  bool bring_up(std::string& error);
  bool wait_ready(int n, Process& p, const std::string& path, const std::string& what, std::string& error);
  void write_files() const;

  CniClusterOptions options_;
  std::string prefix_;
  std::string workdir_;
  bool up_ = false;
  std::map<int, Process> agents_;
  std::map<int, Process> proxies_;
  std::map<int, int> agent_log_index_;
  std::map<int, int> proxy_log_index_;
  std::vector<Process> apps_;
  std::map<std::string, std::string> pod_netns_;
  std::map<std::string, int> pod_node_;
};

/// GoogleTest fixture owning one CniCluster per test. Without root the tests skip visibly; with
/// CI=true they fail instead. On failure the agents' and proxies' logs are printed.
class CniClusterTest : public ::testing::Test {
 protected:
  /// Override to set up the cluster differently (install step, agent or proxy env).
  virtual CniClusterOptions cluster_options() const { return {}; }
  void SetUp() override;
  void TearDown() override;
  CniCluster& c() { return *cluster_; }
  /// Adds `pod` and asserts it got `ip` from host-local.
  void add(int node, const std::string& pod, const std::string& ip, const std::string& ns = "default");

  std::unique_ptr<CniCluster> cluster_;
};

}  // namespace meshnode::integration
