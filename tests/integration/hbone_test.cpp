// End-to-end tests of meshnode-proxy on the simulated two-node cluster (issue 2 §4): real pods,
// real nftables redirection, real peers (python3 tools, curl, openssl), HBONE between the nodes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "integration/cluster_fixture.hpp"

namespace meshnode::integration {
namespace {

constexpr int kHashPort = 9000;
const std::string kClientId = "spiffe://cluster.local/ns/default/sa/client";
const std::string kServerId = "spiffe://cluster.local/ns/default/sa/server";

class HboneTest : public ClusterTest {
 protected:
  /// mn_client.py in the client pod against an mn_server.py `hash` peer (started on demand).
  RunResult transfer(const std::string& up, const std::string& down, seconds timeout,
                     std::vector<std::string> extra = {}, const std::string& to = "server") {
    ensure_hash_app(to);
    std::vector<std::string> argv = {"python3", Cluster::tool("mn_client.py"), "hash", "--host",
                                     cluster().pod(to).ip, "--port", std::to_string(kHashPort), "--up", up,
                                     "--down", down, "--timeout", std::to_string(timeout.count())};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return cluster().in_pod("client", argv, timeout + seconds(10));
  }
  Process& ensure_hash_app(const std::string& pod) {
    auto& app = apps_[pod];
    if (!app.running()) app = cluster().start_app(pod, kHashPort, "hash");
    return app;
  }
  /// Waits until `node`'s metrics show at least one series of `metric` with all `labels`.
  bool metric_appears(int node, const std::string& metric, const std::vector<std::string>& labels) {
    return eventually(seconds(10), [&] { return metric_sum(cluster().metrics(node), metric, labels) >= 1; });
  }
  std::map<std::string, Process> apps_;
};

void expect_transfer_ok(const RunResult& r, int connections = 1) {
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("\"ok\": " + std::to_string(connections) + ","), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("\"failed\": 0,"), std::string::npos) << r.describe();
}

TEST_F(HboneTest, BytesIntactBothWays1KiB) { expect_transfer_ok(transfer("1KiB", "1KiB", seconds(30))); }

TEST_F(HboneTest, BytesIntactBothWays10MiB) { expect_transfer_ok(transfer("10MiB", "10MiB", seconds(60))); }

TEST_F(HboneTest, BytesIntactBothWays100MiB) {
  expect_transfer_ok(transfer("100MiB", "100MiB", seconds(240)));
}

TEST_F(HboneTest, ServerProxySeesClientIdentityOverMutualTls) {
  expect_transfer_ok(transfer("1KiB", "1KiB", seconds(30)));
  const std::vector<std::string> labels = {"source_principal=\"" + kClientId + "\"",
                                           "destination_principal=\"" + kServerId + "\"",
                                           "connection_security_policy=\"mutual_tls\""};
  auto dst = labels;
  dst.push_back("reporter=\"destination\"");
  EXPECT_TRUE(metric_appears(2, "istio_tcp_connections_opened_total", dst))
      << "node2 metrics:\n" << cluster().metrics(2);
  auto src = labels;
  src.push_back("reporter=\"source\"");
  EXPECT_TRUE(metric_appears(1, "istio_tcp_connections_opened_total", src))
      << "node1 metrics:\n" << cluster().metrics(1);
}

TEST_F(HboneTest, PlainTcpWorkloadIsReachedWithoutMutualTls) {
  expect_transfer_ok(transfer("1MiB", "1MiB", seconds(30), {}, "legacy"));
  EXPECT_TRUE(metric_appears(1, "istio_tcp_connections_opened_total",
                             {"reporter=\"source\"", "destination_workload=\"legacy\"",
                              "connection_security_policy=\"unknown\""}))
      << "node1 metrics:\n" << cluster().metrics(1);
  EXPECT_EQ(metric_sum(cluster().metrics(1), "istio_tcp_connections_opened_total",
                       {"destination_workload=\"legacy\"", "connection_security_policy=\"mutual_tls\""}),
            0);
}

TEST_F(HboneTest, HalfClosedClientStillReceivesFullResponse) {
  // The client sends 1 KiB, shuts down its write side, and only then reads: the server sends its
  // trailer only after it saw EOF, so this passes only if the half-close crossed both proxies
  // while the response direction stayed open.
  expect_transfer_ok(transfer("1KiB", "4MiB", seconds(60), {"--half-close"}));
}

TEST_F(HboneTest, ServerFirstProtocolWorks) {
  Process app = cluster().start_app("server", 9001, "greet");
  auto r = cluster().in_pod("client", {"python3", Cluster::tool("mn_client.py"), "greet", "--host",
                                       cluster().pod("server").ip, "--port", "9001", "--timeout", "20"},
                            seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("HELLO meshnode-greeter"), std::string::npos) << r.out;
}

TEST_F(HboneTest, ServerResetReachesClientAsReset) {
  Process app = cluster().start_app("server", 9002, "rst");
  auto r = cluster().in_pod("client", {"python3", Cluster::tool("mn_client.py"), "expect-reset", "--host",
                                       cluster().pod("server").ip, "--port", "9002", "--timeout", "20"},
                            seconds(30));
  EXPECT_EQ(r.exit_code, 0) << "expected ECONNRESET in the client: " << r.describe();
  EXPECT_TRUE(app.wait_for_line("reset-sent", seconds(5))) << app.stdout_text();
}

TEST_F(HboneTest, ClientResetReachesServerAsReset) {
  Process app = cluster().start_app("server", 9003, "observe");
  auto r = cluster().in_pod("client", {"python3", Cluster::tool("mn_client.py"), "send-reset", "--host",
                                       cluster().pod("server").ip, "--port", "9003", "--timeout", "20"},
                            seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ASSERT_TRUE(eventually(seconds(20), [&] {
    return app.count_lines("\"reset\"") + app.count_lines("\"eof\"") > 0;
  })) << "the server never saw the connection end: " << app.stdout_text();
  EXPECT_EQ(app.count_lines("\"reset\""), 1) << "the server saw EOF instead of RST: " << app.stdout_text();
}

TEST_F(HboneTest, ConcurrentConnectionsShareFewHboneConnections) {
  ensure_hash_app("server");
  Process client = cluster().start_in_pod(
      "client",
      {"python3", Cluster::tool("mn_client.py"), "hash", "--host", cluster().pod("server").ip, "--port",
       std::to_string(kHashPort), "--up", "64KiB", "--down", "64KiB", "--connections", "200", "--hold",
       "--timeout", "120"},
      "concurrent-client", /*stdin_pipe=*/true);
  ASSERT_TRUE(client.wait_for_line("\"holding\"", seconds(120)))
      << "not all 200 connections carried bytes both ways:\n" << client.stdout_text() << client.stderr_text();
  // All 200 streams are open now: count the proxy's HBONE connections (made from the client pod).
  auto ss = cluster().in_pod("client", {"ss", "-Htn", "state", "established", "( dport = :15008 )"});
  ASSERT_EQ(ss.exit_code, 0) << ss.describe();
  int hbone = 0;
  std::istringstream lines(ss.out);
  for (std::string line; std::getline(lines, line);) hbone += line.empty() ? 0 : 1;
  EXPECT_GE(hbone, 1) << "no HBONE connection from the client pod:\n" << ss.out;
  EXPECT_LE(hbone, 3) << "200 streams should be pooled over few HBONE connections:\n" << ss.out;
  client.close_stdin();
  const auto code = client.wait_for(seconds(120));
  ASSERT_TRUE(code.has_value()) << "client did not finish";
  EXPECT_EQ(*code, 0) << client.stdout_text() << client.stderr_text();
  EXPECT_NE(client.stdout_text().find("\"ok\": 200,"), std::string::npos) << client.stdout_text();
}

TEST_F(HboneTest, StalledReaderDoesNotSlowParallelTransfer) {
  Process& app = ensure_hash_app("server");
  // One stream asks for 50 MiB and never reads: its windows fill up and stay full.
  Process stalled = cluster().start_in_pod(
      "client",
      {"python3", Cluster::tool("mn_client.py"), "hash", "--stall", "--host", cluster().pod("server").ip,
       "--port", std::to_string(kHashPort), "--down", "50MiB"},
      "stalled-client");
  ASSERT_TRUE(stalled.wait_for_line("\"stalled\"", seconds(20))) << stalled.stderr_text();
  ASSERT_TRUE(eventually(seconds(20), [&] { return app.count_lines("\"header\"") >= 1; }))
      << "the stalled stream never reached the server app: " << app.stdout_text();
  // The parallel 50 MiB transfer through the same pod pair must still complete promptly.
  const auto r = transfer("50MiB", "50MiB", seconds(90));
  expect_transfer_ok(r);
  EXPECT_TRUE(stalled.running()) << "the stalled connection should still be open";
}

/// Certificates for the TLS probes: a leaf with the client's SPIFFE URI SAN signed by `ca_cert`.
std::string make_leaf(const Cluster& c, const std::string& name, const std::string& ca_cert,
                      const std::string& ca_key) {
  const std::string dir = c.workdir() + "/" + name;
  std::filesystem::create_directories(dir);
  {
    std::ofstream ext(dir + "/ext.cnf");
    ext << "subjectAltName=URI:" << kClientId << "\nbasicConstraints=CA:FALSE\n"
        << "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth,serverAuth\n";
  }
  auto req = c.local({"openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                      "-nodes", "-keyout", dir + "/key.pem", "-out", dir + "/leaf.csr", "-subj", "/O=cluster.local"});
  EXPECT_EQ(req.exit_code, 0) << req.describe();
  auto sign = c.local({"openssl", "x509", "-req", "-in", dir + "/leaf.csr", "-CA", ca_cert, "-CAkey", ca_key,
                       "-CAcreateserial", "-CAserial", dir + "/ca.srl", "-days", "1", "-extfile", dir + "/ext.cnf",
                       "-out", dir + "/cert.pem"});
  EXPECT_EQ(sign.exit_code, 0) << sign.describe();
  return dir;
}

std::string make_foreign_root(const Cluster& c) {
  const std::string dir = c.workdir() + "/foreign-root";
  std::filesystem::create_directories(dir);
  auto r = c.local({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", dir + "/root-key.pem", "-out", dir + "/root-cert.pem", "-subj",
                    "/O=cluster.local", "-days", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return dir;
}

class HboneListenerTest : public HboneTest {
 protected:
  /// h2_probe.py from node 1's netns (an off-mesh peer on the node network) to server:15008.
  RunResult probe(const std::string& cert_dir) {
    std::vector<std::string> argv = {"python3", Cluster::tool("h2_probe.py"), "--host", cluster().pod("server").ip,
                                     "--authority", cluster().pod("server").ip + ":" + std::to_string(kHashPort)};
    if (!cert_dir.empty()) {
      argv.insert(argv.end(), {"--cert", cert_dir + "/cert.pem", "--key", cert_dir + "/key.pem"});
    }
    auto r = cluster().in_node(1, argv, seconds(30));
    std::printf("h2_probe: %s", r.out.c_str());
    return r;
  }
  RunResult s_client(const std::string& cert_dir) {
    std::vector<std::string> argv = {"openssl", "s_client", "-connect", cluster().pod("server").ip + ":15008",
                                     "-tls1_3", "-alpn", "h2", "-noservername"};
    if (!cert_dir.empty()) argv.insert(argv.end(), {"-cert", cert_dir + "/cert.pem", "-key", cert_dir + "/key.pem"});
    return cluster().in_node(1, argv, seconds(30));
  }
};

TEST_F(HboneListenerTest, ProbeWithMeshCertificateGetsTunnel) {
  // Positive control for the two tests below: the same probe with a certificate from the mesh root.
  Process& app = ensure_hash_app("server");
  const std::string ca = cluster().ca_dir();
  ASSERT_TRUE(std::filesystem::exists(ca + "/root-key.pem")) << "no root-key.pem in the CA dir " << ca;
  const auto r = probe(make_leaf(cluster(), "mesh-leaf", ca + "/root-cert.pem", ca + "/root-key.pem"));
  EXPECT_EQ(r.exit_code, 0) << "a mesh-issued client certificate should open a tunnel: " << r.describe();
  EXPECT_TRUE(eventually(seconds(10), [&] { return app.count_lines("\"accept\"") >= 1; }));
}

TEST_F(HboneListenerTest, TlsClientWithoutCertificateGetsNoTunnel) {
  Process& app = ensure_hash_app("server");
  const auto sc = s_client("");
  EXPECT_FALSE(sc.timed_out) << sc.describe();
  const auto r = probe("");
  EXPECT_NE(r.exit_code, 0) << "no client certificate must mean no tunnel: " << r.describe();
  EXPECT_EQ(r.out.find("\"status\": 200"), std::string::npos) << r.out;
  EXPECT_EQ(app.count_lines("\"accept\""), 0) << "bytes reached the app: " << app.stdout_text();
}

TEST_F(HboneListenerTest, TlsClientWithCertificateFromAnotherRootGetsNoTunnel) {
  Process& app = ensure_hash_app("server");
  const std::string root = make_foreign_root(cluster());
  const std::string leaf = make_leaf(cluster(), "foreign-leaf", root + "/root-cert.pem", root + "/root-key.pem");
  const auto sc = s_client(leaf);
  EXPECT_FALSE(sc.timed_out) << sc.describe();
  const auto r = probe(leaf);
  EXPECT_NE(r.exit_code, 0) << "a certificate from another root must not open a tunnel: " << r.describe();
  EXPECT_EQ(r.out.find("\"status\": 200"), std::string::npos) << r.out;
  EXPECT_EQ(app.count_lines("\"accept\""), 0) << "bytes reached the app: " << app.stdout_text();
}

TEST_F(HboneListenerTest, PlaintextTo15008IsRefusedWithoutAffectingOtherConnections) {
  Process& app = ensure_hash_app("server");
  Process transfer_bg = cluster().start_in_pod(
      "client",
      {"python3", Cluster::tool("mn_client.py"), "hash", "--host", cluster().pod("server").ip, "--port",
       std::to_string(kHashPort), "--up", "50MiB", "--down", "50MiB", "--timeout", "120"},
      "parallel-transfer");
  ASSERT_TRUE(eventually(seconds(30), [&] { return app.count_lines("\"header\"") >= 1; }))
      << "the tunnelled transfer never reached the app: " << transfer_bg.stderr_text();
  const auto plain = cluster().in_node(1, {"python3", Cluster::tool("mn_client.py"), "plaintext", "--host",
                                           cluster().pod("server").ip, "--port", "15008", "--timeout", "10"},
                                       seconds(30));
  EXPECT_EQ(plain.exit_code, 0) << "15008 should close a plaintext connection: " << plain.describe();
  EXPECT_EQ(plain.out.find("485454502f312e3120323030"), std::string::npos) << "got an HTTP 200: " << plain.out;
  const auto code = transfer_bg.wait_for(seconds(120));
  ASSERT_TRUE(code.has_value()) << "the parallel transfer did not finish";
  EXPECT_EQ(*code, 0) << transfer_bg.stdout_text() << transfer_bg.stderr_text();
  EXPECT_NE(transfer_bg.stdout_text().find("\"failed\": 0,"), std::string::npos) << transfer_bg.stdout_text();
  EXPECT_EQ(app.count_lines("\"header\""), 1) << "only the tunnelled transfer may reach the app";
}

class IdentityMismatchTest : public HboneTest {
 public:
  static void SetUpTestSuite() { start_cluster({.server_sa_on_node2 = "impostor"}); }
};

TEST_F(IdentityMismatchTest, ClientRejectsServerPresentingUnexpectedIdentity) {
  // Node 2's proxy serves the server pod as .../sa/impostor; node 1 expects .../sa/server.
  Process& app = ensure_hash_app("server");
  const auto r = transfer("1KiB", "1KiB", seconds(30));
  EXPECT_NE(r.exit_code, 0) << "the connection must fail: " << r.describe();
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(app.count_lines("\"accept\""), 0) << "bytes reached the app: " << app.stdout_text();
}

}  // namespace
}  // namespace meshnode::integration
