#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "integration/process.hpp"
#include "integration/test_util.hpp"

namespace meshnode::integration {

/// One simulated pod: its own netns on a node, enrolled in that node's meshnode-proxy.
struct Pod {
  std::string name;             ///< workload name, e.g. "client"
  std::string service_account;  ///< as node 1's config states it
  std::string netns;            ///< netns name (/var/run/netns/<netns>)
  std::string ip;               ///< dotted IPv4
  int node = 0;                 ///< 1-based node index
  bool hbone = true;            ///< protocol HBONE (else TCP)
  [[nodiscard]] std::string uid() const { return "cluster1//v1/Pod/default/" + name; }
  [[nodiscard]] std::string identity() const {
    return "spiffe://cluster.local/ns/default/sa/" + service_account;
  }
};

class Cluster;

/// Variations of the demo topology a test suite can ask for.
struct ClusterOptions {
  /// serviceAccount of the `server` workload in node 2's config (node 1's says "server").
  /// Anything else makes node 2's proxy present an identity node 1 does not expect.
  std::string server_sa_on_node2 = "server";
  /// When set, node N's whole --config YAML is this function's result instead of the default one
  /// (the pods' IPs are known by then: cluster.pod(name)). Pod uids must stay Pod::uid(), since the
  /// proxies enroll the pods by them. Written at <workdir>/node<N>.yaml (Cluster::config_path).
  std::function<std::string(const Cluster& cluster, int node)> config_yaml;
};

/// The demo topology (DESIGN §6) built by scripts/cluster.sh with a unique mn-<hex> prefix:
/// node1 pods `client` (HBONE) and `client2` (HBONE), node2 pods `server` (HBONE) and `legacy`
/// (TCP), one meshnode-proxy per node in the node netns with a shared CA dir. The destructor stops
/// the proxies and removes every namespace and the work dir. Not thread-safe.
class Cluster {
 public:
  /// Brings everything up and waits for both proxies' /healthz/ready.
  /// @returns the cluster, or a message saying which step failed (with command output).
  static std::unique_ptr<Cluster> create(const ClusterOptions& options, std::string& error);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  [[nodiscard]] const Pod& pod(std::string_view name) const;
  [[nodiscard]] const std::string& node_netns(int node) const { return node_netns_.at(node); }
  [[nodiscard]] const std::string& node_ip(int node) const { return node_ip_.at(node); }
  [[nodiscard]] const std::string& workdir() const { return workdir_; }
  [[nodiscard]] std::string ca_dir() const { return workdir_ + "/ca"; }
  /// The --config file of node N's proxy (it reloads it when the file changes).
  [[nodiscard]] std::string config_path(int node) const {
    return workdir_ + "/node" + std::to_string(node) + ".yaml";
  }

  /// Runs argv inside a pod's / node's netns, with a deadline.
  RunResult in_pod(std::string_view pod, const std::vector<std::string>& argv,
                   milliseconds timeout = seconds(30)) const;
  RunResult in_node(int node, const std::vector<std::string>& argv,
                    milliseconds timeout = seconds(30)) const;
  /// Runs argv in the test's own (host) netns; for local file work only (openssl, ...).
  RunResult local(const std::vector<std::string>& argv, milliseconds timeout = seconds(30)) const;
  /// Starts argv in a pod's netns in the background; stdout/stderr go to <workdir>/<label>.out/.err.
  Process start_in_pod(std::string_view pod, const std::vector<std::string>& argv,
                       const std::string& label, bool stdin_pipe = false) const;
  /// Starts tools/mn_server.py in `pod` on `port` in `mode` and waits for its "ready" line.
  Process start_app(std::string_view pod, int port, const std::string& mode) const;

  /// GET http://<node ip>:15020/metrics from inside the node netns ("" on failure).
  [[nodiscard]] std::string metrics(int node) const;
  /// Process id of node N's meshnode-proxy (ip netns exec execs it in place).
  [[nodiscard]] pid_t proxy_pid(int node) const { return proxies_.at(node).pid(); }
  /// The proxy's stderr so far.
  [[nodiscard]] std::string proxy_log(int node) const;
  /// Absolute path of tests/integration/tools/<name>.
  [[nodiscard]] static std::string tool(std::string_view name);

 private:
  Cluster() = default;
  bool bring_up(const ClusterOptions& options, std::string& error);
  bool start_proxy(int node, std::string& error);
  void write_config(int node, const ClusterOptions& options) const;
  void tear_down() noexcept;

  std::string prefix_;
  std::string workdir_;
  std::map<std::string, std::string> env_;
  std::vector<Pod> pods_;
  std::map<int, std::string> node_netns_;
  std::map<int, std::string> node_ip_;
  std::map<int, Process> proxies_;
  bool cluster_up_ = false;
};


/// GoogleTest fixture owning one Cluster per test suite. Without root the tests skip visibly
/// (GTEST_SKIP); with CI=true they fail instead. Derive and override SetUpTestSuite to pass
/// different ClusterOptions.
class ClusterTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { start_cluster({}); }
  static void TearDownTestSuite() { cluster_.reset(); }

 protected:
  static void start_cluster(const ClusterOptions& options);
  void SetUp() override;
  void TearDown() override;
  static Cluster& cluster() { return *cluster_; }

 private:
  static inline std::unique_ptr<Cluster> cluster_;
  static inline std::string skip_reason_;
  static inline std::string setup_error_;
};

}  // namespace meshnode::integration
