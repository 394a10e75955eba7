// L4 authorization end to end (issue 5 §Tests): policies in node 2's local YAML, enforced by its
// meshnode-proxy on inbound HBONE and inbound plaintext (15006), re-checked live when the file
// changes. Two client identities on node 1 (default/client and other/admin), a line-echo app on the
// server pod (node 2), an off-mesh client in node 1's own netns. Every refusal is checked in the
// client (its connection is reset or closed before an echo), in node 2's metrics
// (response_flags="DENY"), in its access log (the reason naming the policy) and in /debug/authz.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "integration/cluster_fixture.hpp"

namespace meshnode::integration {
namespace {

constexpr int kPort = 7001;       // echo app on the server pod
constexpr int kOtherPort = 7002;  // a second echo app on the server pod
const std::string kClientId = "spiffe://cluster.local/ns/default/sa/client";
const std::string kAdminId = "spiffe://cluster.local/ns/other/sa/admin";  // the client2 pod

/// Both nodes' workloads: client (default/client) and client2 (other/admin) on node 1, server
/// (default/server, selects the WorkloadSelector policy default/deny-port) and legacy (TCP) on node 2.
std::string workloads_yaml(const Cluster& c) {
  struct W {
    const char* pod;
    const char* ns;
    const char* sa;
    const char* extra;
  };
  std::string out = "workloads:\n";
  for (const W& w : {W{"client", "default", "client", ""}, W{"client2", "other", "admin", ""},
                     W{"server", "default", "server", "  authorizationPolicies: [\"default/deny-port\"]\n"},
                     W{"legacy", "default", "legacy", ""}}) {
    const Pod& p = c.pod(w.pod);
    out += "- uid: " + p.uid() + "\n  name: " + p.name + "\n  namespace: " + w.ns +
           "\n  serviceAccount: " + w.sa + "\n  workloadIps: [\"" + p.ip +
           "\"]\n  protocol: " + (p.hbone ? "HBONE" : "TCP") + "\n  node: node" + std::to_string(p.node) +
           "\n" + w.extra;
  }
  return out + "services: []\n";
}

/// One policy entry of the `policies:` list; `rules` is the YAML flow value of `rules:`.
std::string policy(const std::string& name, const std::string& action, const std::string& rules,
                   const std::string& scope = "Namespace", bool dry_run = false) {
  return "- name: " + name + "\n  namespace: default\n  scope: " + scope + "\n  action: " + action +
         "\n  dryRun: " + (dry_run ? "true" : "false") + "\n  rules: " + rules + "\n";
}

class AuthzTest : public ClusterTest {
 public:
  static void SetUpTestSuite() {
    start_cluster(
        {.config_yaml = [](const Cluster& c, int) { return workloads_yaml(c) + "policies: []\n"; }});
  }

 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Every test starts from "no policies" and reads only the log lines it caused.
    set_policies("");
    log_offset_ = cluster().proxy_log(2).size();
    ready_ = true;
  }
  void TearDown() override {
    ClusterTest::TearDown();
    if (ready_ && HasFailure()) {
      std::printf("--- node2 log since the test began ---\n%s\n", log2().c_str());
    }
  }

  /// Rewrites node 2's config with `policies` (YAML list items, "" = none) and waits until the proxy
  /// reloaded it (meshnode_config_reloads_total{result="ok"} went up). The file is replaced atomically.
  /// @returns the steady_clock time right before the write began.
  std::chrono::steady_clock::time_point set_policies(const std::string& policies) {
    const auto reloads = [&] {
      return metric_sum(cluster().metrics(2), "meshnode_config_reloads_total", {"result=\"ok\""});
    };
    const double before = reloads();
    const std::string path = cluster().config_path(2);
    const std::string text =
        workloads_yaml(cluster()) + "policies:" + (policies.empty() ? " []\n" : "\n" + policies);
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::ofstream out(path + ".tmp");
      out << text;
    }
    std::filesystem::rename(path + ".tmp", path);
    EXPECT_TRUE(eventually(seconds(10), [&] { return reloads() > before; }))
        << "node2 did not reload its config; log:\n"
        << log2();
    return t0;
  }

  Process& echo_app(int port) {
    auto& app = apps_[port];
    if (!app.running()) {
      app = cluster().start_in_pod(
          "server", {"python3", Cluster::tool("mn_authz.py"), "server", "--port", std::to_string(port)},
          "authz-app-" + std::to_string(port));
      if (!app.wait_for_line("\"ready\"", seconds(20))) {
        ADD_FAILURE() << "echo app on :" << port << " did not start: " << app.stderr_text();
      }
    }
    return app;
  }

  /// One echo round trip from `from` (a pod name, or "node1" for node 1's netns: off the mesh).
  RunResult probe(const std::string& from, int port) {
    echo_app(port);
    std::vector<std::string> argv = {
        "python3", Cluster::tool("mn_authz.py"), "probe",     "--host", cluster().pod("server").ip,
        "--port",  std::to_string(port),         "--timeout", "10"};
    return from == "node1" ? cluster().in_node(1, argv, seconds(20))
                           : cluster().in_pod(from, argv, seconds(20));
  }
  void expect_allowed(const std::string& from, int port) {
    const auto r = probe(from, port);
    EXPECT_EQ(r.exit_code, 0) << from << " -> server:" << port << " should pass: " << r.describe();
    EXPECT_NE(r.out.find("\"echoed\""), std::string::npos) << r.out;
  }
  void expect_refused(const std::string& from, int port) {
    const auto r = probe(from, port);
    EXPECT_EQ(r.exit_code, 1) << from << " -> server:" << port << " should be refused: " << r.describe();
    EXPECT_TRUE(r.out.find("\"reset\"") != std::string::npos || r.out.find("\"eof\"") != std::string::npos)
        << "expected a reset or closed connection: " << r.describe();
  }

  [[nodiscard]] std::string log2() const { return cluster().proxy_log(2).substr(log_offset_); }
  /// Node 2 log lines since the test began that contain every needle.
  [[nodiscard]] int log_lines_with(const std::vector<std::string>& needles) const {
    std::istringstream in(log2());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      bool all = true;
      for (const auto& x : needles) all = all && line.find(x) != std::string::npos;
      n += all ? 1 : 0;
    }
    return n;
  }
  /// Waits for an access-log line of a refused connection to server:`port` carrying `reason`
  /// (and, if given, the source identity).
  void expect_denied_log(int port, const std::string& reason, const std::string& src_identity) {
    std::vector<std::string> needles = {"access\t",
                                        "dst.addr=" + cluster().pod("server").ip + ":" + std::to_string(port),
                                        "error=\"policy_denied: " + reason + "\""};
    if (!src_identity.empty()) needles.push_back("src.identity=\"" + src_identity + "\"");
    EXPECT_TRUE(eventually(seconds(5), [&] { return log_lines_with(needles) >= 1; }))
        << "no access-log line with reason \"" << reason << "\" for :" << port;
  }

  [[nodiscard]] double denied(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> labels = {"reporter=\"destination\"", "response_flags=\"DENY\"",
                                       "destination_workload=\"server\""};
    labels.insert(labels.end(), extra.begin(), extra.end());
    return metric_sum(cluster().metrics(2), "istio_tcp_connections_closed_total", labels);
  }
  void expect_denied_metric(double before, const std::vector<std::string>& extra = {}) {
    EXPECT_TRUE(eventually(seconds(5), [&] { return denied(extra) >= before + 1; }))
        << "istio_tcp_connections_closed_total{response_flags=\"DENY\"} did not go up; node2 metrics:\n"
        << cluster().metrics(2);
  }

  /// GET /debug/authz on node 2's admin address (127.0.0.1:15000 in its netns).
  nlohmann::json explain(const std::string& src_ip, const std::string& src_identity, int port) {
    std::vector<std::string> argv = {"curl",
                                     "-sS",
                                     "-m",
                                     "5",
                                     "-G",
                                     "http://127.0.0.1:15000/debug/authz",
                                     "--data-urlencode",
                                     "src=" + src_ip,
                                     "--data-urlencode",
                                     "dst=" + cluster().pod("server").ip + ":" + std::to_string(port)};
    if (!src_identity.empty()) argv.insert(argv.end(), {"--data-urlencode", "src_identity=" + src_identity});
    const auto r = cluster().in_node(2, argv, seconds(10));
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out;
    return j;
  }
  /// /debug/authz agrees with the proxy: same decision, same reason, same deciding policy.
  void expect_explained(const std::string& src_ip, const std::string& src_identity, int port,
                        const std::string& decision, const std::string& deciding_policy,
                        const std::string& reason) {
    const auto j = explain(src_ip, src_identity, port);
    if (j.is_discarded()) return;
    EXPECT_EQ(j.value("decision", ""), decision) << j.dump(2);
    EXPECT_EQ(j.value("decidingPolicy", ""), deciding_policy) << j.dump(2);
    EXPECT_EQ(j.value("reason", ""), reason) << j.dump(2);
    if (!deciding_policy.empty()) {
      bool named = false;
      for (const auto& p : j.value("policies", nlohmann::json::array())) {
        named = named || (p.value("policy", "") == deciding_policy && p.value("applies", false) &&
                          p.value("matched", false));
      }
      EXPECT_TRUE(named) << deciding_policy << " should be listed as applying and matching: " << j.dump(2);
    }
  }

  std::string ip(const std::string& pod) const { return cluster().pod(pod).ip; }

  std::map<int, Process> apps_;
  std::size_t log_offset_ = 0;
  bool ready_ = false;
};

TEST_F(AuthzTest, DenyByDestinationPort) {
  // WorkloadSelector scope: the server workload lists default/deny-port.
  set_policies(policy("deny-port", "Deny", "[[[{destinationPorts: [" + std::to_string(kOtherPort) + "]}]]]",
                      "WorkloadSelector"));
  const double before = denied({"source_principal=\"" + kClientId + "\""});
  expect_allowed("client", kPort);
  expect_refused("client", kOtherPort);
  EXPECT_EQ(echo_app(kOtherPort).count_lines("\"accept\""), 0) << "a denied connection reached the app";
  expect_denied_metric(
      before, {"source_principal=\"" + kClientId + "\"", "connection_security_policy=\"mutual_tls\""});
  expect_denied_log(kOtherPort, "explicitly denied by: default/deny-port", kClientId);
  expect_explained(ip("client"), kClientId, kOtherPort, "deny", "default/deny-port",
                   "explicitly denied by: default/deny-port");
  expect_explained(ip("client"), kClientId, kPort, "allow", "", "no allow policies apply");
}

TEST_F(AuthzTest, DenyBySourceNamespace) {
  set_policies(policy("deny-other-ns", "Deny", "[[[{namespaces: [{Exact: other}]}]]]"));
  const double before = denied({"source_principal=\"" + kAdminId + "\""});
  expect_allowed("client", kPort);
  expect_refused("client2", kPort);
  expect_denied_metric(before, {"source_principal=\"" + kAdminId + "\""});
  expect_denied_log(kPort, "explicitly denied by: default/deny-other-ns", kAdminId);
  expect_explained(ip("client2"), kAdminId, kPort, "deny", "default/deny-other-ns",
                   "explicitly denied by: default/deny-other-ns");
  expect_explained(ip("client"), kClientId, kPort, "allow", "", "no allow policies apply");
}

TEST_F(AuthzTest, DenyByPrincipalPrefix) {
  // Principals are matched without "spiffe://".
  set_policies(
      policy("deny-other-prefix", "Deny", "[[[{principals: [{Prefix: \"cluster.local/ns/other/\"}]}]]]"));
  const double before = denied({"source_principal=\"" + kAdminId + "\""});
  expect_allowed("client", kPort);
  expect_refused("client2", kPort);
  expect_denied_metric(before, {"source_principal=\"" + kAdminId + "\""});
  expect_denied_log(kPort, "explicitly denied by: default/deny-other-prefix", kAdminId);
  expect_explained(ip("client2"), kAdminId, kPort, "deny", "default/deny-other-prefix",
                   "explicitly denied by: default/deny-other-prefix");
}

TEST_F(AuthzTest, DenyByPrincipalSuffix) {
  set_policies(policy("deny-client-suffix", "Deny", "[[[{principals: [{Suffix: \"/sa/client\"}]}]]]"));
  const double before = denied({"source_principal=\"" + kClientId + "\""});
  expect_allowed("client2", kPort);
  expect_refused("client", kPort);
  expect_denied_metric(before, {"source_principal=\"" + kClientId + "\""});
  expect_denied_log(kPort, "explicitly denied by: default/deny-client-suffix", kClientId);
  expect_explained(ip("client"), kClientId, kPort, "deny", "default/deny-client-suffix",
                   "explicitly denied by: default/deny-client-suffix");
  expect_explained(ip("client2"), kAdminId, kPort, "allow", "", "no allow policies apply");
}

TEST_F(AuthzTest, AllowListAdmitsOnlyTheListedIdentity) {
  set_policies(policy("allow-client", "Allow",
                      "[[[{serviceAccounts: [{namespace: default, serviceAccount: client}]}]]]"));
  const double before = denied({"source_principal=\"" + kAdminId + "\""});
  expect_allowed("client", kPort);
  expect_refused("client2", kPort);
  expect_denied_metric(before, {"source_principal=\"" + kAdminId + "\""});
  expect_denied_log(kPort, "no allow policy matched", kAdminId);
  expect_explained(ip("client2"), kAdminId, kPort, "deny", "", "no allow policy matched");
  expect_explained(ip("client"), kClientId, kPort, "allow", "default/allow-client",
                   "allowed by: default/allow-client");
}

TEST_F(AuthzTest, MutualTlsRequiredRefusesPlaintextButNotHbone) {
  // Positive control: without policies, a client off the mesh (node 1's netns) reaches the pod
  // through its plaintext inbound listener (15006).
  expect_allowed("node1", kPort);
  set_policies(policy("require-mtls", "Deny", "[[[{notPrincipals: [{Presence: []}]}]]]"));
  const double before = denied({"connection_security_policy=\"unknown\""});
  expect_refused("node1", kPort);
  expect_allowed("client", kPort);
  expect_allowed("client2", kPort);
  expect_denied_metric(before, {"connection_security_policy=\"unknown\""});
  expect_denied_log(kPort, "explicitly denied by: default/require-mtls", "");
  EXPECT_GE(log_lines_with({"access\t", "src.addr=" + cluster().node_ip(1) + ":",
                            "error=\"policy_denied: explicitly denied by: default/require-mtls\""}),
            1)
      << "the refused plaintext connection should come from node 1 (" << cluster().node_ip(1) << ")";
  expect_explained(cluster().node_ip(1), "", kPort, "deny", "default/require-mtls",
                   "explicitly denied by: default/require-mtls");
  expect_explained(ip("client"), kClientId, kPort, "allow", "", "no allow policies apply");
}

TEST_F(AuthzTest, DryRunDenyLeavesTrafficWorkingAndLogs) {
  set_policies(policy("dry-deny-client", "Deny", "[[[{principals: [{Suffix: \"/sa/client\"}]}]]]",
                      "Namespace",
                      /*dry_run=*/true));
  const double before = denied();
  expect_allowed("client", kPort);
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return log_lines_with({"authz\tdry-run\t", "policy=default/dry-deny-client would deny",
                           "src.addr=" + ip("client") + ":",
                           "dst.addr=" + ip("server") + ":" + std::to_string(kPort)}) >= 1;
  })) << "no dry-run line naming default/dry-deny-client";
  EXPECT_EQ(denied(), before) << "a dry-run policy must not deny";
  EXPECT_EQ(log_lines_with({"policy_denied"}), 0) << "a dry-run policy must not deny";
  const auto j = explain(ip("client"), kClientId, kPort);
  EXPECT_EQ(j.value("decision", ""), "allow") << j.dump(2);
  EXPECT_EQ(j.value("dryRunDenies", nlohmann::json::array()),
            nlohmann::json::array({"default/dry-deny-client"}))
      << j.dump(2);
}

TEST_F(AuthzTest, PolicyChangeClosesNowDeniedIdleConnectionWithinOneSecond) {
  echo_app(kPort);
  echo_app(kOtherPort);
  auto hold = [&](int port) {
    Process p = cluster().start_in_pod("client",
                                       {"python3", Cluster::tool("mn_authz.py"), "hold", "--host",
                                        ip("server"), "--port", std::to_string(port), "--timeout", "60"},
                                       "authz-hold-" + std::to_string(port), /*stdin_pipe=*/true);
    EXPECT_TRUE(p.wait_for_line("\"open\"", seconds(20))) << p.stdout_text() << p.stderr_text();
    return p;
  };
  Process revoked = hold(kPort);
  Process kept = hold(kOtherPort);
  ASSERT_FALSE(HasFailure());
  const double before = denied({"source_principal=\"" + kClientId + "\""});

  const auto t_write = set_policies(
      policy("revoke-port", "Deny", "[[[{destinationPorts: [" + std::to_string(kPort) + "]}]]]"));
  ASSERT_TRUE(revoked.wait_for_line("\"closed\"", seconds(5)))
      << "the now-denied connection is still open: " << revoked.stdout_text() << revoked.stderr_text();
  const auto out = revoked.stdout_text();
  const auto closed = nlohmann::json::parse(out.substr(out.find("{\"event\": \"closed\"")), nullptr, false);
  ASSERT_TRUE(closed.is_object()) << out;
  EXPECT_TRUE(closed.value("how", "") == "eof" || closed.value("how", "") == "reset") << out;
  // steady_clock and Python's time.monotonic() both read CLOCK_MONOTONIC.
  const double t0 = std::chrono::duration<double>(t_write.time_since_epoch()).count();
  const double latency = closed.value("mono", 0.0) - t0;
  std::printf("revocation latency (config write -> client sees the close): %.0f ms (%s)\n", latency * 1000,
              closed.value("how", "").c_str());
  RecordProperty("revocation_latency_ms", static_cast<int>(latency * 1000));
  EXPECT_GT(latency, 0) << out;
  EXPECT_LT(latency, 1.0) << "closed " << latency << " s after the policy write";

  EXPECT_TRUE(eventually(seconds(5), [&] {
    return log_lines_with({"authz\tclosed: policy change",
                           "dst.addr=" + ip("server") + ":" + std::to_string(kPort),
                           "explicitly denied by: default/revoke-port"}) >= 1;
  })) << "no \"closed: policy change\" line";
  expect_denied_log(kPort, "closed: policy change: explicitly denied by: default/revoke-port", kClientId);
  expect_denied_metric(before, {"source_principal=\"" + kClientId + "\""});
  EXPECT_EQ(log_lines_with({"authz\tclosed: policy change",
                            "dst.addr=" + ip("server") + ":" + std::to_string(kOtherPort)}),
            0);

  // The still-allowed connection was untouched: it still echoes.
  EXPECT_EQ(kept.count_lines("\"closed\""), 0) << kept.stdout_text();
  kept.close_stdin();
  const auto code = kept.wait_for(seconds(15));
  ASSERT_TRUE(code.has_value()) << kept.stdout_text();
  EXPECT_EQ(*code, 0) << kept.stdout_text() << kept.stderr_text();
  EXPECT_NE(kept.stdout_text().find("\"ok\": true"), std::string::npos) << kept.stdout_text();
  // And a new connection to the revoked port is refused.
  expect_refused("client", kPort);
  expect_explained(ip("client"), kClientId, kPort, "deny", "default/revoke-port",
                   "explicitly denied by: default/revoke-port");
}

}  // namespace
}  // namespace meshnode::integration
