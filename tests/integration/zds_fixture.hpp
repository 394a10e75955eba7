#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.hpp"
#include "fakes/zds_server.hpp"
#include "integration/process.hpp"
#include "integration/test_util.hpp"

namespace meshnode::integration {

/// One pod of a ZDS cluster: a netns built by scripts/cluster.sh, known to the config of every
/// node, enrolled only when a (fake) node agent sends its AddWorkload.
struct ZdsPod {
  std::string name;   ///< "n<node>p<index>", also the workload name and service account
  std::string netns;  ///< netns name
  std::string ip;     ///< dotted IPv4
  int node = 0;
  base::UniqueFd fd;  ///< open fd of /var/run/netns/<netns> (what the agent passes over ZDS)
  [[nodiscard]] std::string uid() const { return "cluster1//v1/Pod/default/" + name; }
  [[nodiscard]] nodeapi::zds::WorkloadInfo info() const;
};

/// scripts/cluster.sh topology with `pods_per_node` pods per node (2 nodes) and NO proxy started:
/// tests start shared-mode proxies (`--inpod-uds`) and enroll pods through fake node agents
/// (fakes::ZdsServer). Every node config lists every pod (HBONE) except those named in
/// `not_in_config` (pod names, e.g. "n1p0"): such pods are known only from what ZDS says of them,
/// as in a cluster whose local config does not list every pod. The destructor stops every
/// process it started and removes the namespaces and the work dir. Not thread-safe.
class ZdsCluster {
 public:
  static std::unique_ptr<ZdsCluster> create(int pods_per_node, std::string& error,
                                            const std::set<std::string>& not_in_config = {});
  ~ZdsCluster();
  ZdsCluster(const ZdsCluster&) = delete;
  ZdsCluster& operator=(const ZdsCluster&) = delete;

  [[nodiscard]] ZdsPod& pod(int node, int index);
  [[nodiscard]] const std::string& node_netns(int node) const { return node_netns_.at(node); }
  [[nodiscard]] const std::string& node_ip(int node) const { return node_ip_.at(node); }
  [[nodiscard]] const std::string& workdir() const { return workdir_; }
  /// The node agent's ZDS socket path for `node` (in the work dir).
  [[nodiscard]] std::string zds_path(int node) const;

  /// Starts meshnode-proxy in shared mode in `node`'s netns (log <workdir>/<label>.log). `env`
  /// entries (NAME=value) are set for the proxy only. Without `local_config` it gets neither the
  /// node config nor the built-in CA directory (a control plane must provide both). Does not wait.
  Process start_proxy(int node, const std::string& label, ProxyPorts ports = {},
                      const std::vector<std::string>& env = {}, bool local_config = true) const;
  /// HTTP status of GET /healthz/ready (0 if unreachable).
  [[nodiscard]] int readiness(int node, ProxyPorts ports = {}) const;
  /// GET /metrics ("" on failure).
  [[nodiscard]] std::string metrics(int node, ProxyPorts ports = {}) const;
  /// TCP ports listening inside `netns` (`ss -Hltn` run inside it).
  [[nodiscard]] std::set<int> listening_ports(const std::string& netns) const;

  RunResult in_netns(const std::string& netns, const std::vector<std::string>& argv,
                     milliseconds timeout = seconds(30)) const;
  Process start_in_netns(const std::string& netns, const std::vector<std::string>& argv, const std::string& label,
                         bool stdin_pipe = false) const;
  /// tools/zds_peer.py `server` on `port` in `pod`, waited for until it listens.
  Process start_echo_server(const ZdsPod& pod, int port) const;
  /// tools/zds_peer.py `hold` from `from` to `to`:`port`, waited for until the first echo.
  Process start_hold(const ZdsPod& from, const ZdsPod& to, int port, const std::string& label) const;
  /// One connection from `from` to `to`:`port` that must echo a line (tools/zds_peer.py loop, 1 try).
  RunResult round_trip(const ZdsPod& from, const ZdsPod& to, int port) const;

 private:
  ZdsCluster() = default;
  bool bring_up(int pods_per_node, std::string& error, const std::set<std::string>& not_in_config);
  void tear_down() noexcept;

  std::string prefix_;
  std::string workdir_;
  std::vector<std::unique_ptr<ZdsPod>> pods_;
  std::map<int, std::string> node_netns_;
  std::map<int, std::string> node_ip_;
  bool cluster_up_ = false;
};

/// The steps of a node agent's (re)connection: accept the proxy, expect ZdsHello, send Add for each
/// pod (each must be acked with no error), then SnapshotSent. @returns "" or what went wrong.
std::string replay_snapshot(fakes::ZdsServer& agent, const std::vector<ZdsPod*>& pods,
                            std::chrono::seconds within = std::chrono::seconds(20));



/// Per-test fixture: a fresh ZdsCluster for each test (SetUp) removed in TearDown. Without root the
/// tests skip visibly; with CI=true they fail instead. On failure, prints the logs in the work dir.
class ZdsClusterTest : public ::testing::Test {
 protected:
  virtual int pods_per_node() const { return 2; }
  /// Pods (by name) the node configs leave out: enrolled with ZDS's WorkloadInfo only.
  virtual std::set<std::string> pods_not_in_config() const { return {}; }
  void SetUp() override;
  void TearDown() override;
  ZdsCluster& cluster() { return *cluster_; }

  std::unique_ptr<ZdsCluster> cluster_;
};

}  // namespace meshnode::integration
