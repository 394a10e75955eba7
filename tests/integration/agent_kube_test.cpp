// meshnode-agent driven by the Kubernetes API (issue 13), against the fake API server
// (tests/fakes/kube_api_server.py), real network namespaces with a process in each (the netns
// finder looks for them under /proc), and the fake ZDS proxy. Needs root; skips otherwise.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fakes/kube_api.hpp"
#include "integration/agent_fixture.hpp"
#include "integration/process.hpp"
#include "kube/config.hpp"

namespace meshnode::agent {
namespace {

using nlohmann::json;
using integration::eventually;

// A pod sandbox: a netns holding `ip` with a process running in it (what the finder looks for).
class Sandbox {
 public:
  Sandbox(const std::string& suffix, const std::string& ip, const std::string& dir) : netns_(suffix), ip_(ip) {
    ok_ = netns_.ok() && netns_.add_ip(ip + "/32");
    if (!ok_) return;
    process_ = integration::Process::spawn({"ip", "netns", "exec", netns_.name(), "sleep", "600"},
                                           {.stdout_path = dir + "/" + suffix + ".out", .stderr_path = dir + "/" + suffix + ".err"});
    // `ip netns exec` has entered the netns once /proc shows the child's netns as the pod's.
    ok_ = eventually(5s, [&] {
      struct stat a {}, b {};
      return ::stat(("/proc/" + std::to_string(process_.pid()) + "/ns/net").c_str(), &a) == 0 &&
             ::stat(netns_.path().c_str(), &b) == 0 && a.st_ino == b.st_ino;
    });
  }
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] const TestNetns& netns() const { return netns_; }
  [[nodiscard]] ino_t ino() const {
    struct stat st {};
    return ::stat(netns_.path().c_str(), &st) == 0 ? st.st_ino : 0;
  }

 private:
  TestNetns netns_;
  std::string ip_;
  integration::Process process_;
  bool ok_ = false;
};

// One IP per test run: the finder enters every netns of the machine, and other suites may hold
// 10.9.0.7 at the same time.
std::string unique_ip() {
  std::random_device rd;
  return "10." + std::to_string(200 + rd() % 50) + "." + std::to_string(rd() % 250) + "." + std::to_string(2 + rd() % 250);
}

class KubeAgent : public AgentEvents {
 protected:
  void SetUp() override {
    AgentEvents::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    api_ = fakes::FakeKubeApi::start({.dir = dir_.string()});
    auto cluster = kube::kubeconfig_config(api_->write_kubeconfig());
    ASSERT_TRUE(cluster) << cluster.error().message();
    KubeOptions kube;
    kube.cluster = *cluster;
    kube.node_name = "node-1";
    kube.sync_timeout = 10s;
    options_.kube = kube;
    ip_ = unique_ip();
  }
  void TearDown() override {
    agent_.reset();
    api_.reset();
    AgentEvents::TearDown();
  }
  // A running pod as the kubelet reports it once its sandbox is up.
  void create_running_pod(const std::string& ns, const std::string& name, const json& extra = json::object()) {
    api_->create_pod(ns, name, "node-1", extra);
    api_->patch_pod_status(ns, name, {{"status", {{"phase", "Running"}, {"podIP", ip_}, {"podIPs", {{{"ip", ip_}}}}}}});
  }
  std::string annotation(const std::string& ns, const std::string& name) {
    const json pod = api_->get_pod(ns, name);
    const json& a = pod["metadata"].value("annotations", json::object());
    return a.value("ambient.istio.io/redirection", "");
  }
  bool settled() {
    return eventually(10s, [&] { return agent_->reconciled(); });
  }
  std::string uid_of(const std::string& ns, const std::string& name) {
    return api_->get_pod(ns, name)["metadata"]["uid"].get<std::string>();
  }
  json record(const std::string& uid) {
    std::ifstream in(std::filesystem::path(options_.run_dir) / "pods" / (uid + ".json"));
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str(), nullptr, false);
  }

  std::unique_ptr<fakes::FakeKubeApi> api_;
  std::string ip_;
};

TEST_F(KubeAgent, NamespaceLabelEnrollsARunningPodLiveAndPodLabelNoneReleasesIt) {
  Sandbox sandbox("live", ip_, dir_.string());
  ASSERT_TRUE(sandbox.ok());
  api_->create_namespace("shop");
  create_running_pod("shop", "web", {{"spec", {{"serviceAccountName", "web-sa"}}}});
  start_agent();
  FakeProxy proxy(options_.zds_socket);
  ASSERT_EQ(proxy.wait_for(1).size(), 1u);
  ASSERT_TRUE(settled());
  EXPECT_EQ(agent_->enrolled_pods(), 0u) << "enrolled before any label asked for it";

  api_->patch_namespace("shop", {{"metadata", {{"labels", {{"istio.io/dataplane-mode", "ambient"}}}}}});
  auto got = proxy.wait_for(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].kind, "add");
  EXPECT_EQ(got[1].uid, uid_of("shop", "web"));
  EXPECT_EQ(got[1].netns_ino, sandbox.ino()) << "the netns holding the pod IP was not the one passed";
  EXPECT_NE(sandbox.netns().nft().find("table inet meshnode"), std::string::npos);
  EXPECT_TRUE(eventually(5s, [&] { return annotation("shop", "web") == "enabled"; }));
  EXPECT_EQ(record(got[1].uid).value("serviceAccount", ""), "web-sa");

  api_->patch_pod("shop", "web", {{"metadata", {{"labels", {{"istio.io/dataplane-mode", "none"}}}}}});
  got = proxy.wait_for(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].kind, "del");
  ASSERT_TRUE(settled());
  EXPECT_EQ(sandbox.netns().nft(), "");
  EXPECT_EQ(agent_->enrolled_pods(), 0u);
  EXPECT_TRUE(eventually(5s, [&] { return annotation("shop", "web").empty(); }));
  const std::string metrics = metrics_.render();
  EXPECT_NE(metrics.find("meshnode_agent_kube_lists_total{resource=\"pods\"}"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("meshnode_agent_kube_watch_events_total{resource=\"namespaces\"}"), std::string::npos);
}

TEST_F(KubeAgent, CniAddTakesIdentityFromTheApiAndFailsClosedWhenThePodIsUnknown) {
  Sandbox sandbox("cni", ip_, dir_.string());
  ASSERT_TRUE(sandbox.ok());
  api_->create_namespace("shop", {{"istio.io/dataplane-mode", "ambient"}});
  api_->create_namespace("plain");
  api_->create_pod("shop", "api", "node-1", {{"spec", {{"serviceAccountName", "payments"}}}});  // Pending, no IPs yet
  start_agent();
  FakeProxy proxy(options_.zds_socket);
  ASSERT_EQ(proxy.wait_for(1).size(), 1u);
  const std::string uid = uid_of("shop", "api");
  auto body = [&](const std::string& ns, const std::string& name, const std::string& pod_uid) {
    return R"({"Netns":")" + sandbox.netns().path() + R"(","PodName":")" + name + R"(","PodNamespace":")" + ns +
           R"(","PodUID":")" + pod_uid + R"(","PodServiceAccount":"admin","IPs":[{"Interface":0,"Address":{"IP":")" +
           ip_ + R"(","Mask":"/////w=="},"Gateway":null}]})";
  };
  // A pod the API does not know, in an ambient namespace: fail closed (the kubelet retries).
  const HttpResult unknown = post(options_.plugin_socket, "/cmdadd", body("shop", "ghost", "uid-ghost"));
  EXPECT_EQ(unknown.status, 500);
  EXPECT_NE(unknown.body.find("not in the API cache"), std::string::npos) << unknown.body;
  EXPECT_EQ(proxy.wait_for(2, 100ms).size(), 1u);
  // Unknown pod in a namespace that is not ambient: not enrolled, not an error.
  const HttpResult plain = post(options_.plugin_socket, "/cmdadd", body("plain", "ghost", "uid-ghost2"));
  EXPECT_EQ(plain.status, 200) << plain.body;
  EXPECT_NE(plain.body.find("\"enrolled\":false"), std::string::npos) << plain.body;

  const HttpResult added = post(options_.plugin_socket, "/cmdadd", body("shop", "api", uid));
  ASSERT_EQ(added.status, 200) << added.body;
  auto got = proxy.wait_for(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].uid, uid);
  EXPECT_EQ(record(uid).value("serviceAccount", ""), "payments") << "identity taken from the request";
  EXPECT_TRUE(eventually(5s, [&] { return annotation("shop", "api") == "enabled"; }));
  // The kubelet then reports the IP the sandbox has: the enrollment stays as it is.
  api_->patch_pod_status("shop", "api", {{"status", {{"phase", "Running"}, {"podIPs", {{{"ip", ip_}}}}}}});
  ASSERT_TRUE(settled());
  EXPECT_EQ(proxy.wait_for(3, 200ms).size(), 2u) << "a matching status update re-enrolled the pod";
  EXPECT_EQ(agent_->enrolled_pods(), 1u);
}

TEST_F(KubeAgent, FinishedJobReleasesItsIpAndANewPodReusingItIsEnrolledWithItsOwnIdentity) {
  api_->create_namespace("batch", {{"istio.io/dataplane-mode", "ambient"}});
  start_agent();
  FakeProxy proxy(options_.zds_socket);
  ASSERT_EQ(proxy.wait_for(1).size(), 1u);
  std::string job_uid;
  {
    Sandbox job("job", ip_, dir_.string());
    ASSERT_TRUE(job.ok());
    create_running_pod("batch", "job-1", {{"spec", {{"serviceAccountName", "batch-sa"}}}});
    job_uid = uid_of("batch", "job-1");
    auto got = proxy.wait_for(2);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].kind, "add");
    EXPECT_EQ(got[1].uid, job_uid);
    api_->patch_pod_status("batch", "job-1", {{"status", {{"phase", "Succeeded"}}}});
    got = proxy.wait_for(3);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[2].kind, "del");
    EXPECT_EQ(got[2].uid, job_uid);
    EXPECT_EQ(job.netns().nft(), "") << "released at once: rules gone while the sandbox still exists";
  }  // the sandbox goes away; the finished pod object stays in the API, with its IP
  Sandbox web("reuse", ip_, dir_.string());
  ASSERT_TRUE(web.ok());
  create_running_pod("batch", "web-2", {{"spec", {{"serviceAccountName", "web-sa"}}}});
  const std::string web_uid = uid_of("batch", "web-2");
  auto got = proxy.wait_for(4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].kind, "add");
  EXPECT_EQ(got[3].uid, web_uid);
  EXPECT_EQ(got[3].netns_ino, web.ino());
  EXPECT_EQ(record(web_uid).value("serviceAccount", ""), "web-sa");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(options_.run_dir) / "pods" / (job_uid + ".json")));
  EXPECT_EQ(agent_->enrolled_pods(), 1u);
}

TEST_F(KubeAgent, TwoLivePodsClaimingOneIpAreRefused) {
  Sandbox sandbox("dup", ip_, dir_.string());
  ASSERT_TRUE(sandbox.ok());
  api_->create_namespace("shop", {{"istio.io/dataplane-mode", "ambient"}});
  create_running_pod("shop", "a");
  create_running_pod("shop", "b");
  start_agent();
  FakeProxy proxy(options_.zds_socket);
  ASSERT_EQ(proxy.wait_for(1).size(), 1u);
  ASSERT_TRUE(settled());
  EXPECT_EQ(agent_->enrolled_pods(), 0u);
  EXPECT_EQ(sandbox.netns().nft(), "");
  // Each reconcile of a conflicting pod counts one refusal; at start a pod may be reconciled twice
  // (its informer ADD and the start-up sweep), so both pods show as at least two refusals.
  const std::string text = metrics_.render();
  const std::string name = "meshnode_agent_kube_ip_conflicts_total ";
  const auto at = text.find("\n" + name);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_GE(std::stol(text.substr(at + 1 + name.size())), 2) << text;
}

TEST_F(KubeAgent, RestartWithRunningPodsReconcilesWithoutTouchingTheirRules) {
  Sandbox sandbox("restart", ip_, dir_.string());
  ASSERT_TRUE(sandbox.ok());
  api_->create_namespace("shop", {{"istio.io/dataplane-mode", "ambient"}});
  create_running_pod("shop", "web");
  start_agent();
  {
    FakeProxy proxy(options_.zds_socket);
    ASSERT_EQ(proxy.wait_for(2).size(), 2u);
    // While the proxy is still connected: the agent enrolls only once it has read the proxy's Ack,
    // and a proxy gone before that makes the add fail.
    ASSERT_TRUE(eventually(5s, [&] { return annotation("shop", "web") == "enabled"; }));
  }
  const std::string rules = sandbox.netns().nft(/*handles=*/true);
  agent_.reset();
  api_->reset_requests();

  start_agent();
  FakeProxy proxy(options_.zds_socket);
  auto got = proxy.wait_for(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, "add");
  EXPECT_EQ(got[0].netns_ino, sandbox.ino());
  EXPECT_EQ(got[1].kind, "snapshot_sent");
  ASSERT_TRUE(settled());
  EXPECT_EQ(proxy.wait_for(3, 200ms).size(), 2u) << "the pod was enrolled again";
  EXPECT_EQ(sandbox.netns().nft(/*handles=*/true), rules) << "working rules were re-applied";
  for (const json& r : api_->requests()) {
    EXPECT_NE(r.value("method", ""), "PATCH") << "an intact, annotated pod was patched: " << r.dump();
  }
}

#ifdef MESHNODE_PROXY_BIN

// The real proxies and a two-node cluster, with both agents (in-process) driven by the API: a
// namespace label moves a running pod pair's traffic from plaintext to mutual TLS, and removing it
// moves it back, without restarting anything.
class KubeAgentWithProxy : public AgentWithProxy {
 protected:
  void SetUp() override {
    AgentWithProxy::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    api_ = fakes::FakeKubeApi::start({.dir = dir_.string()});
    auto cluster = kube::kubeconfig_config(api_->write_kubeconfig());
    ASSERT_TRUE(cluster) << cluster.error().message();
    cluster_ = *cluster;
    api_->create_namespace("shop");
    for (int n = 1; n <= 2; ++n) {
      const std::string name = "pod" + std::to_string(n);
      api_->create_pod("shop", name, "node" + std::to_string(n), {{"spec", {{"serviceAccountName", "sa" + std::to_string(n)}}}});
      api_->patch_pod_status("shop", name, {{"status", {{"phase", "Running"}, {"podIPs", {{{"ip", pod_ip(n)}}}}}}});
      // The pod's own process, by which the agent finds its netns.
      sandboxes_.push_back(integration::Process::spawn(
          {"ip", "netns", "exec", pod_netns(n), "sleep", "600"},
          {.stdout_path = (dir_ / (name + ".out")).string(), .stderr_path = (dir_ / (name + ".err")).string()}));
    }
    // The agents look for the pods' processes in a /proc of this test's own: every simulated
    // cluster gives its pods the same IPs, and the netns finder picks the first netns that holds
    // the pod's IP, which under a parallel ctest may be another test's pod (the listeners then
    // went up in that netns and this test waited for them in vain).
    proc_root_ = dir_ / "proc";
    std::filesystem::create_directories(proc_root_);
    for (const auto& sandbox : sandboxes_) {
      const std::string pid = std::to_string(sandbox.pid());
      std::filesystem::create_directory_symlink("/proc/" + pid, proc_root_ / pid);
    }
  }
  void TearDown() override {
    agents_.clear();
    sandboxes_.clear();
    api_.reset();
    AgentWithProxy::TearDown();
  }
  void start_kube_agent(int n) {
    AgentOptions o = node_options(n);
    KubeOptions kube;
    kube.cluster = cluster_;
    kube.node_name = "node" + std::to_string(n);
    kube.sync_timeout = 10s;
    kube.proc_root = proc_root_.string();
    o.kube = kube;
    auto agent = Agent::start(o, registries_[n]);
    ASSERT_TRUE(agent) << agent.error().message();
    agents_[n] = std::move(*agent);
  }
  double mtls_at_node2() {
    return integration::metric_sum(proxy_metrics(2), "istio_tcp_connections_opened_total",
                                   {"reporter=\"destination\"", "connection_security_policy=\"mutual_tls\""});
  }
  bool enrolled_everywhere(std::size_t count) {
    return integration::eventually(10s, [&] {
      return agents_[1]->enrolled_pods() == count && agents_[2]->enrolled_pods() == count && agents_[1]->reconciled() &&
             agents_[2]->reconciled();
    });
  }

  std::unique_ptr<fakes::FakeKubeApi> api_;
  kube::ClusterConfig cluster_;
  std::vector<integration::Process> sandboxes_;
  std::filesystem::path proc_root_;
};

TEST_F(KubeAgentWithProxy, NamespaceLabelMovesRunningTrafficFromPlainToMtlsAndBack) {
  for (int n = 1; n <= 2; ++n) {
    start_kube_agent(n);
    start_proxy(n);
  }
  for (int n = 1; n <= 2; ++n) {
    ASSERT_TRUE(integration::eventually(10s, [&] { return agents_[n]->proxy_connections() == 1; }))
        << integration::read_file((dir_ / ("proxy" + std::to_string(n) + ".log")).string());
  }
  ASSERT_TRUE(start_app());
  ASSERT_TRUE(enrolled_everywhere(0));
  EXPECT_EQ(call_app(), "peer=" + pod_ip(1) + "\n") << "plaintext before any label";
  EXPECT_EQ(mtls_at_node2(), 0);

  api_->patch_namespace("shop", {{"metadata", {{"labels", {{"istio.io/dataplane-mode", "ambient"}}}}}});
  ASSERT_TRUE(enrolled_everywhere(1));
  ASSERT_TRUE(integration::eventually(10s, [&] { return listeners(2).find(":15008") != std::string::npos; }))
      << listeners(2) << integration::read_file((dir_ / "proxy2.log").string());
  EXPECT_TRUE(call_app().starts_with("peer=")) << integration::read_file((dir_ / "proxy1.log").string());
  EXPECT_TRUE(integration::eventually(5s, [&] { return mtls_at_node2() == 1; })) << proxy_metrics(2);
  EXPECT_NE(proxy_metrics(2).find("source_principal=\"spiffe://cluster.local/ns/shop/sa/sa1\""), std::string::npos)
      << "the identity is the API's service account";

  api_->patch_namespace("shop", {{"metadata", {{"labels", {{"istio.io/dataplane-mode", nullptr}}}}}});
  ASSERT_TRUE(enrolled_everywhere(0));
  EXPECT_TRUE(integration::eventually(10s, [&] { return listeners(2).find(":15008") == std::string::npos; }));
  EXPECT_EQ(sh({"ip", "netns", "exec", pod_netns(1), "nft", "list", "ruleset"}), "");
  EXPECT_EQ(call_app(), "peer=" + pod_ip(1) + "\n") << "plaintext again after the label is gone";
  EXPECT_EQ(mtls_at_node2(), 1) << "a connection after release went through the mesh";
}

#endif  // MESHNODE_PROXY_BIN

}  // namespace
}  // namespace meshnode::agent
