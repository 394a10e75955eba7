// The real Debian CNI chain (bridge + host-local, containernetworking-plugins) followed by
// meshnode-cni, in a network namespace this test creates: what a runtime does for a pod.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace meshnode::cni::testing {
namespace {

using nlohmann::json;
using Env = std::map<std::string, std::string>;

constexpr const char* kBridgePlugin = "/usr/lib/cni/bridge";

std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "ip";
}

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

/// Removes the netns and the bridge whatever happens to the test.
struct ChainCleanup {
  std::string netns, bridge;
  ~ChainCleanup() {
    (void)run_process({ip_binary(), "netns", "del", netns}, {}, "");
    (void)run_process({ip_binary(), "link", "del", bridge}, {}, "");
  }
};

bool must_run() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

TEST(CniChain, BridgeThenMeshnodeCniInARealNetns) {
  if (::geteuid() != 0 || ::access(kBridgePlugin, X_OK) != 0) {
    if (must_run()) FAIL() << "CI=true: needs root and " << kBridgePlugin << " (containernetworking-plugins)";
    GTEST_SKIP() << "needs root and " << kBridgePlugin << " (apt-get install containernetworking-plugins)";
  }
  const std::string hex = random_hex6();
  const std::string netns = "mn-" + hex + "-cni";
  const std::string netns_path = "/var/run/netns/" + netns;
  ChainCleanup cleanup{netns, "mn" + hex};
  TempDir dir;
  const std::string ip_forward_before = read_file("/proc/sys/net/ipv4/ip_forward");

  ProcessResult r = run_process({ip_binary(), "netns", "add", netns}, {}, "");
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const std::string bridge_conf = R"({"cniVersion":"1.0.0","name":"mn-)" + hex +
                                  R"(","type":"bridge","bridge":"mn)" + hex +
                                  R"(","isGateway":false,"ipMasq":false,"ipam":{"type":"host-local",)"
                                  R"("ranges":[[{"subnet":"198.19.200.0/24"}]],"dataDir":")" +
                                  (dir.path() / "ipam").string() + R"("}})";
  Env env = {{"CNI_COMMAND", "ADD"},
             {"CNI_CONTAINERID", "mn-" + hex},
             {"CNI_NETNS", netns_path},
             {"CNI_IFNAME", "eth0"},
             {"CNI_PATH", "/usr/lib/cni"},
             {"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"},
             {"CNI_ARGS",
              "IgnoreUnknown=1;K8S_POD_NAMESPACE=mn;K8S_POD_NAME=pod-" + hex + ";K8S_POD_UID=uid-" + hex}};
  const ProcessResult bridge_add = run_process({kBridgePlugin}, env, bridge_conf);
  ASSERT_EQ(bridge_add.exit_code, 0) << bridge_add.out << bridge_add.err;
  const json bridge_result = json::parse(bridge_add.out);
  ASSERT_FALSE(bridge_result["ips"].empty()) << bridge_add.out;
  const std::string cidr = bridge_result["ips"][0]["address"];
  const std::string pod_ip = cidr.substr(0, cidr.find('/'));

  FakeAgent agent(dir.path() / "pluginevent.sock");
  agent.reply("/cmdadd", {200, ""});
  agent.reply("/cmddel", {200, ""});
  // The runtime embeds the previous plugin's result verbatim as prevResult.
  const std::string mesh_conf =
      R"({"cniVersion":"1.0.0","name":"mn-)" + hex + R"(","type":"meshnode-cni","agentSocket":")" +
      (dir.path() / "pluginevent.sock").string() + R"(","prevResult":)" + bridge_add.out + "}";
  const ProcessResult mesh_add = run_process({MESHNODE_CNI_BINARY}, env, mesh_conf);
  EXPECT_EQ(mesh_add.exit_code, 0) << mesh_add.out << mesh_add.err;
  EXPECT_EQ(mesh_add.out, bridge_add.out);

  auto seen = agent.seen();
  ASSERT_EQ(seen.size(), 1u);
  const json event = json::parse(seen[0].body);
  EXPECT_EQ(event["Netns"], netns_path);
  EXPECT_EQ(event["PodName"], "pod-" + hex);
  EXPECT_EQ(event["PodNamespace"], "mn");
  EXPECT_EQ(event["PodUID"], "uid-" + hex);
  ASSERT_EQ(event["IPs"].size(), 1u);
  EXPECT_EQ(event["IPs"][0]["Address"]["IP"], pod_ip);
  EXPECT_EQ(event["IPs"][0]["Address"]["Mask"], "////AA==");

  // Teardown in reverse order, each plugin with the cached result as prevResult.
  env["CNI_COMMAND"] = "DEL";
  const ProcessResult mesh_del = run_process({MESHNODE_CNI_BINARY}, env, mesh_conf);
  EXPECT_EQ(mesh_del.exit_code, 0) << mesh_del.err;
  EXPECT_EQ(mesh_del.out, "");
  seen = agent.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].path, "/cmddel");
  const std::string bridge_del_conf =
      bridge_conf.substr(0, bridge_conf.size() - 1) + R"(,"prevResult":)" + bridge_add.out + "}";
  const ProcessResult bridge_del = run_process({kBridgePlugin}, env, bridge_del_conf);
  EXPECT_EQ(bridge_del.exit_code, 0) << bridge_del.out << bridge_del.err;

  const std::string ip_forward_after = read_file("/proc/sys/net/ipv4/ip_forward");
  if (ip_forward_after != ip_forward_before) {
    std::ofstream("/proc/sys/net/ipv4/ip_forward") << ip_forward_before;
    ADD_FAILURE() << "the chain changed net.ipv4.ip_forward (restored)";
  }
}

}  // namespace
}  // namespace meshnode::cni::testing
