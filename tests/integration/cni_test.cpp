// Issue 4, end to end: pods created the way a container runtime creates them — a netns, then the
// node's CNI chain (Debian `bridge` + `host-local`, then the real meshnode-cni) run with the node
// netns as the host — with the real meshnode-agent and meshnode-proxy (shared mode, ZDS,
// --transparent-inbound) on each node. Plus one pod started by a real runtime (podman 4.3, CNI
// backend, runc) on a network chaining meshnode-cni.
//
// Each test builds its own cluster (scripts/lib/cluster.sh with 0 hand-made pods, the pods through
// scripts/lib/cni.sh) and removes it in the destructor. Root only: skips visibly otherwise, fails
// with CI=true.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "integration/cluster_fixture.hpp"
#include "integration/cni_cluster.hpp"
#include "integration/process.hpp"

namespace meshnode::integration {
namespace {

using nlohmann::json;

class CniChainTest : public CniClusterTest {};

const std::string kClientId = "spiffe://cluster.local/ns/default/sa/client";
const std::string kServerId = "spiffe://cluster.local/ns/default/sa/server";

// Pod enrolled through the real chain: the agent's rules are in its netns, the proxy listens
// there, traffic to a pod on the other node goes over HBONE mTLS, and the app sees the client's IP.
TEST_F(CniChainTest, EnrolledPodGetsRulesListenersMtlsAndTheAppSeesTheClientIp) {
  add(1, "client", "198.19.1.10");
  add(2, "server", "198.19.2.10");
  for (const std::string pod : {"client", "server"}) {
    const std::string rules = c().nft_ruleset(c().pod_netns(pod));
    EXPECT_TRUE(has(rules, "table inet meshnode")) << pod << ":\n" << rules;
    EXPECT_TRUE(has(rules, "redirect to :15001")) << rules;
    EXPECT_TRUE(has(rules, "redirect to :15006")) << rules;
    EXPECT_TRUE(has(rules, "0x00000539") || has(rules, "0x539")) << rules;
    EXPECT_TRUE(has(c().ip_rules(c().pod_netns(pod)), "lookup 100")) << pod;
    EXPECT_EQ(c().listeners(c().pod_netns(pod)), (std::set<std::string>{"15001", "15006", "15008"})) << pod;
  }
  auto check = c().check_chain("client");
  EXPECT_EQ(check.exit_code, 0) << "CNI CHECK: " << check.describe();

  Process& app = c().start_app("server", 8080);
  auto r = c().ping("client", "198.19.2.10", 8080);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "OK\n");
  // Transparent inbound: node 2's proxy connected to the app from the client pod's own address.
  EXPECT_TRUE(app.wait_for_line("198.19.1.10", seconds(5))) << app.stdout_text();
  const std::vector<std::string> labels = {"source_principal=\"" + kClientId + "\"",
                                           "destination_principal=\"" + kServerId + "\"",
                                           "connection_security_policy=\"mutual_tls\""};
  auto dst = labels;
  dst.push_back("reporter=\"destination\"");
  auto src = labels;
  src.push_back("reporter=\"source\"");
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return metric_sum(c().node_metrics(2, 15020), "istio_tcp_connections_opened_total", dst) >= 1;
  })) << c().node_metrics(2, 15020);
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return metric_sum(c().node_metrics(1, 15020), "istio_tcp_connections_opened_total", src) >= 1;
  }));
  EXPECT_EQ(gauge(c().node_metrics(1, 15014), "meshnode_agent_enrolled_pods"), 1);
}

// Excluded namespace: meshnode-cni passes bridge's result through untouched, no rules, no
// listeners, and plain traffic between two such pods still flows (not through any proxy).
TEST_F(CniChainTest, ExcludedNamespaceGetsNoRulesAndPlainTrafficFlows) {
  // Trace every plugin's output to compare meshnode-cni's result with bridge's.
  auto r = c().add_pod(1, "sysclient", "kube-system",
                       "export CNI_EXEC_TRACE_DIR=" + shell_quote(c().workdir() + "/trace") + "; ");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ASSERT_EQ(r.out, "198.19.1.10\n");
  auto r2 = c().add_pod(2, "sysserver", "kube-system");
  ASSERT_EQ(r2.exit_code, 0) << r2.describe();
  ASSERT_EQ(r2.out, "198.19.2.10\n");

  const std::string cid = c().prefix().substr(3) + "-sysclient";
  const std::string bridge_out = read_file(c().workdir() + "/trace/" + cid + "-ADD-0-bridge.json");
  const std::string ours_out = read_file(c().workdir() + "/trace/" + cid + "-ADD-1-meshnode-cni.json");
  ASSERT_FALSE(bridge_out.empty());
  EXPECT_EQ(json::parse(ours_out), json::parse(bridge_out)) << "prevResult must pass through unchanged";

  for (const std::string pod : {"sysclient", "sysserver"}) {
    EXPECT_FALSE(has(c().nft_ruleset(c().pod_netns(pod)), "meshnode")) << pod;
    EXPECT_FALSE(has(c().ip_rules(c().pod_netns(pod)), "lookup 100")) << pod;
    EXPECT_TRUE(c().listeners(c().pod_netns(pod)).empty()) << pod;
  }
  Process& app = c().start_app("sysserver", 8080);
  auto ping = c().ping("sysclient", "198.19.2.10", 8080);
  ASSERT_EQ(ping.exit_code, 0) << ping.describe();
  EXPECT_EQ(ping.out, "OK\n");
  EXPECT_TRUE(app.wait_for_line("198.19.1.10", seconds(5)));
  EXPECT_EQ(metric_sum(c().node_metrics(1, 15020), "istio_tcp_connections_opened_total", {}), 0);
  EXPECT_EQ(metric_sum(c().node_metrics(2, 15020), "istio_tcp_connections_opened_total", {}), 0);
  EXPECT_EQ(gauge(c().node_metrics(1, 15014), "meshnode_agent_enrolled_pods"), 0);
  // meshnode-cni's excludeNamespaces: the agent never heard of those pods.
  EXPECT_EQ(metric_sum(c().node_metrics(1, 15014), "istio_cni_plugin_requests_total", {"event=\"cmdadd\""}), 0);

  // A namespace the agent's policy does not enroll: the agent is asked and declines (200,
  // enrolled false), and the pod is just as untouched.
  auto other = c().add_pod(2, "otherpod", "other");
  ASSERT_EQ(other.exit_code, 0) << other.describe();
  EXPECT_EQ(other.out, "198.19.2.11\n");
  EXPECT_FALSE(has(c().nft_ruleset(c().pod_netns("otherpod")), "meshnode"));
  EXPECT_TRUE(c().listeners(c().pod_netns("otherpod")).empty());
  EXPECT_EQ(metric_sum(c().node_metrics(2, 15014), "istio_cni_plugin_requests_total",
                       {"event=\"cmdadd\"", "response_code=\"200\""}),
            1);
  EXPECT_EQ(gauge(c().node_metrics(2, 15014), "meshnode_agent_enrolled_pods"), 0);
}

// DEL (meshnode-cni then bridge, netns still there): rules and proxy listeners are gone.
TEST_F(CniChainTest, DelRemovesRulesAndListeners) {
  add(1, "client", "198.19.1.10");
  const std::string netns = c().pod_netns("client");
  ASSERT_TRUE(has(c().nft_ruleset(netns), "table inet meshnode"));
  ASSERT_EQ(c().listeners(netns).size(), 3u);

  auto del = c().del_chain("client");
  ASSERT_EQ(del.exit_code, 0) << del.describe();
  EXPECT_FALSE(has(c().nft_ruleset(netns), "meshnode")) << c().nft_ruleset(netns);
  EXPECT_FALSE(has(c().ip_rules(netns), "lookup 100"));
  EXPECT_TRUE(eventually(seconds(5), [&] { return c().listeners(netns).empty(); }));
  EXPECT_NE(c().in_netns(netns, {"ip", "link", "show", "eth0"}).exit_code, 0) << "bridge DEL removes eth0";
  EXPECT_EQ(gauge(c().node_metrics(1, 15014), "meshnode_agent_enrolled_pods"), 0);
  // DEL is idempotent: again, with everything already gone.
  auto again = c().del_chain("client");
  EXPECT_EQ(again.exit_code, 0) << again.describe();
}

// Agent killed and restarted with the same run dir: a connection loop never fails, the pods
// stay enrolled (rules, listeners, CHECK), and a new pod can be added afterwards.
TEST_F(CniChainTest, AgentRestartKeepsTrafficAndEnrollment) {
  add(1, "client", "198.19.1.10");
  add(2, "server", "198.19.2.10");
  c().start_app("server", 8080);
  Process loop = c().start_in_pod("client", {"python3", Cluster::tool("mn_loop.py"), "198.19.2.10", "8080"}, "loop",
                                  true);
  ASSERT_TRUE(loop.wait_for_line("first-ok", seconds(10))) << loop.stdout_text();

  for (int n : {1, 2}) {
    c().agent(n).signal(SIGKILL);
    ASSERT_TRUE(c().agent(n).wait_for(seconds(5)).has_value());
  }
  // Traffic keeps flowing with no agent at all.
  const int before = loop.count_lines("\"event\": \"fail\"");
  const auto t = std::chrono::steady_clock::now();
  eventually(seconds(1), [&] { return std::chrono::steady_clock::now() - t > milliseconds(800); });
  EXPECT_EQ(loop.count_lines("\"event\": \"fail\""), before);
  std::string error;
  for (int n : {1, 2}) ASSERT_TRUE(c().start_agent(n, error)) << error;
  // The restarted agents replay their pods: each proxy gets its snapshot back.
  for (int n : {1, 2}) {
    EXPECT_TRUE(eventually(seconds(10), [&] {
      return gauge(c().node_metrics(n, 15014), "ztunnel_connected") == 1 &&
             gauge(c().node_metrics(n, 15014), "meshnode_agent_enrolled_pods") == 1;
    })) << c().node_metrics(n, 15014);
  }
  EXPECT_TRUE(eventually(seconds(10), [&] { return c().check_chain("client").exit_code == 0; }))
      << c().check_chain("client").describe();
  EXPECT_TRUE(has(c().nft_ruleset(c().pod_netns("client")), "table inet meshnode"));
  EXPECT_EQ(c().listeners(c().pod_netns("client")).size(), 3u);
  add(1, "client2", "198.19.1.11");
  auto r = c().ping("client2", "198.19.2.10", 8080);
  EXPECT_EQ(r.out, "OK\n") << r.describe();

  loop.close_stdin();
  ASSERT_TRUE(loop.wait_for(seconds(10)).has_value());
  EXPECT_TRUE(loop.wait_for_line("summary", seconds(1)));
  EXPECT_EQ(loop.count_lines("\"event\": \"fail\""), 0) << loop.stdout_text();
  EXPECT_GE(loop.count_lines("first-ok"), 1);
}

// Proxy killed and started again: the agent replays its snapshot to the new proxy, listeners
// come back in the pod netns and mTLS traffic recovers.
TEST_F(CniChainTest, ProxyRestartGetsTheSnapshotAndTrafficRecovers) {
  add(1, "client", "198.19.1.10");
  add(2, "server", "198.19.2.10");
  Process& app = c().start_app("server", 8080);
  ASSERT_EQ(c().ping("client", "198.19.2.10", 8080).out, "OK\n");

  c().proxy(1).signal(SIGKILL);
  ASSERT_TRUE(c().proxy(1).wait_for(seconds(5)).has_value());
  EXPECT_TRUE(eventually(seconds(5), [&] { return c().listeners(c().pod_netns("client")).empty(); }));
  std::string error;
  ASSERT_TRUE(c().start_proxy(1, error)) << error;
  EXPECT_TRUE(eventually(seconds(10), [&] { return c().listeners(c().pod_netns("client")).size() == 3; }));
  EXPECT_TRUE(eventually(seconds(10), [&] { return c().ping("client", "198.19.2.10", 8080).out == "OK\n"; }));
  const std::vector<std::string> labels = {"reporter=\"source\"", "source_principal=\"" + kClientId + "\"",
                                           "connection_security_policy=\"mutual_tls\""};
  EXPECT_GE(metric_sum(c().node_metrics(1, 15020), "istio_tcp_connections_opened_total", labels), 1);
  EXPECT_GE(app.count_lines("198.19.1.10"), 2);
  EXPECT_EQ(c().check_chain("client").exit_code, 0);
}

// Agent down during ADD: the chain fails with meshnode-cni's CNI error (code 999, non-zero exit)
// and the pod netns is left without any of our rules (nothing half-enrolled).
TEST_F(CniChainTest, AgentDownMakesAddFailAndLeavesNoRules) {
  c().agent(1).terminate(seconds(5));
  const std::string netns = c().prefix() + "-n1-orphan";
  ASSERT_EQ(run({"ip", "netns", "add", netns}, seconds(5), c().workdir()).exit_code, 0);
  const std::string args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=orphan;K8S_POD_UID=u-orphan";
  auto r = c().bash("cni_chain " + shell_quote(c().workdir()) + " 1 ADD orphan1 /var/run/netns/" + netns + " " +
                    shell_quote(args));
  EXPECT_NE(r.exit_code, 0) << r.describe();
  json err = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(err.is_object()) << r.describe();
  EXPECT_EQ(err.value("code", 0), 999) << r.out;
  EXPECT_FALSE(err.value("msg", std::string()).empty());
  EXPECT_TRUE(has(r.err, "meshnode-cni")) << "the executor names the failing plugin: " << r.err;
  EXPECT_FALSE(has(c().nft_ruleset(netns), "meshnode"));
  EXPECT_FALSE(has(c().ip_rules(netns), "lookup 100"));
  EXPECT_TRUE(c().listeners(netns).empty());
  // The runtime's cleanup after a failed ADD: DEL succeeds even without the agent.
  auto del = c().bash("cni_chain " + shell_quote(c().workdir()) + " 1 DEL orphan1 /var/run/netns/" + netns + " " +
                      shell_quote(args));
  EXPECT_EQ(del.exit_code, 0) << del.describe();
  // Through the helper as well: cni_pod_add fails and removes the netns it made.
  auto helper = c().add_pod(1, "client");
  EXPECT_NE(helper.exit_code, 0);
  EXPECT_NE(run({"ip", "netns", "pids", c().prefix() + "-n1-client"}, seconds(5), c().workdir()).exit_code, 0)
      << "netns of the failed pod removed";
}

// A real container runtime: podman 4.3 (CNI backend, runc) runs a busybox container on a network
// chaining meshnode-cni. Its ADD reaches node 1's agent, the container's outbound TCP is captured
// by the agent's rules and carried by node 1's proxy over HBONE to the server pod on node 2, which
// counts a mutual_tls connection from the container's identity; `--rm` runs the DEL.
TEST_F(CniChainTest, PodmanContainerTrafficIsCapturedAndCarriedOverHbone) {
  if (run({"sh", "-c", "command -v podman && command -v runc && test -x /bin/busybox"}, seconds(5), c().workdir())
          .exit_code != 0) {
    if (is_ci()) FAIL() << "podman, runc or busybox-static missing (scripts/install-deps.sh installs them)";
    GTEST_SKIP() << "podman, runc or busybox-static missing (scripts/install-deps.sh installs them)";
  }
  add(2, "server", "198.19.2.10");
  Process& http = c().start_http("server", 8080);
  auto setup = c().bash("podman_setup " + shell_quote(c().workdir()) + " 1 " +
                            shell_quote(c().node_dir(1) + "/plugin.sock"),
                        seconds(120));
  ASSERT_EQ(setup.exit_code, 0) << setup.describe();

  auto r = c().bash("mn_podman " + shell_quote(c().workdir()) +
                        " run --rm --name podclient localhost/mn-busybox:latest"
                        " sh -c 'ip -4 -o addr show eth0; wget -qO- http://198.19.2.10:8080/'",
                    seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(has(r.out, "198.19.9.10/24")) << r.out;
  EXPECT_TRUE(has(r.out, "hello from the server pod")) << r.out;
  const std::string pod_id = "spiffe://cluster.local/ns/default/sa/podclient";
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return metric_sum(c().node_metrics(2, 15020), "istio_tcp_connections_opened_total",
                      {"reporter=\"destination\"", "source_principal=\"" + pod_id + "\"",
                       "destination_principal=\"" + kServerId + "\"",
                       "connection_security_policy=\"mutual_tls\""}) >= 1;
  })) << c().node_metrics(2, 15020);
  EXPECT_GE(metric_sum(c().node_metrics(1, 15020), "istio_tcp_connections_opened_total",
                       {"reporter=\"source\"", "source_principal=\"" + pod_id + "\"",
                        "connection_security_policy=\"mutual_tls\""}),
            1);
  // The server saw the container's own address (transparent inbound on node 2).
  EXPECT_TRUE(has(http.stderr_text(), "198.19.9.10 - -")) << http.stderr_text();
  // podman's ADD and (--rm) DEL both went through node 1's agent.
  const std::string agent = c().node_metrics(1, 15014);
  EXPECT_GE(metric_sum(agent, "istio_cni_plugin_requests_total", {"event=\"cmdadd\""}), 1) << agent;
  EXPECT_GE(metric_sum(agent, "istio_cni_plugin_requests_total", {"event=\"cmddel\""}), 1) << agent;
  EXPECT_EQ(gauge(agent, "meshnode_agent_enrolled_pods"), 0);
}

}  // namespace
}  // namespace meshnode::integration
