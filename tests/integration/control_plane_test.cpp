// The production path end to end (issue 12): shared-mode proxies with NO local config and no
// built-in CA, pods enrolled over ZDS (fake node agents), known only from xDS and with certificates
// only from the CA, both served by meshnode-fake-istiod (real gRPC + TLS) running on node 1.
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "integration/zds_fixture.hpp"

namespace meshnode::integration {
namespace {

using nlohmann::json;
using std::chrono::steady_clock;

constexpr int kEchoPort = 9000;
constexpr int kXdsPort = 15010;
constexpr int kCaPort = 15012;

std::string identity_of(const ZdsPod& p) { return "spiffe://cluster.local/ns/default/sa/" + p.name; }

class ControlPlaneTest : public ZdsClusterTest {
 protected:
  std::set<std::string> pods_not_in_config() const override { return {"n1p0", "n1p1", "n2p0", "n2p1"}; }

  std::string resources_path() const { return (*cluster_).workdir() + "/resources.yaml"; }
  std::string root_path() const { return (*cluster_).workdir() + "/istiod-root.pem"; }

  /// The resource file: every pod in `pods` as an HBONE workload on its node, then `extra` entries.
  void write_resources(const std::vector<const ZdsPod*>& pods, const std::string& extra = "") const {
    std::ofstream out(resources_path());
    out << "resources:\n";
    for (const auto* p : pods) {
      out << "- workload: {uid: \"" << p->uid() << "\", name: " << p->name << ", namespace: default, serviceAccount: "
          << p->name << ", addresses: [\"" << p->ip << "\"], tunnelProtocol: HBONE, node: node" << p->node
          << ", trustDomain: cluster.local}\n";
    }
    out << extra;
  }
  std::vector<const ZdsPod*> all_pods() {
    return {&(*cluster_).pod(1, 0), &(*cluster_).pod(1, 1), &(*cluster_).pod(2, 0), &(*cluster_).pod(2, 1)};
  }

  void start_istiod(const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> argv = {MESHNODE_FAKE_ISTIOD_BIN, "--resources", resources_path(), "--root-cert", root_path(),
                                     "--listen", (*cluster_).node_ip(1), "--xds-port", std::to_string(kXdsPort),
                                     "--ca-port", std::to_string(kCaPort)};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    istiod_ = (*cluster_).start_in_netns((*cluster_).node_netns(1), argv, "istiod", /*stdin_pipe=*/true);
    ASSERT_TRUE(istiod_.wait_for_line("ready xds=", seconds(20))) << istiod_.stderr_text();
  }

  /// Sends one command to the fake and waits for its answer; returns the stdout lines it printed.
  std::string command(const std::string& cmd) {
    const std::string before = istiod_.stdout_text();
    const int answered = istiod_.count_lines("ok " + cmd) + istiod_.count_lines("error ");
    EXPECT_TRUE(istiod_.write_stdin(cmd + "\n"));
    EXPECT_TRUE(eventually(seconds(10), [&] {
      return istiod_.count_lines("ok " + cmd) + istiod_.count_lines("error ") > answered;
    })) << cmd;
    std::string now = istiod_.stdout_text();
    EXPECT_EQ(now.find("error ", before.size()), std::string::npos) << cmd << ": " << now.substr(before.size());
    return now.substr(before.size());
  }

  std::vector<std::string> control_plane_env(int node) const {
    const std::string host = (*cluster_).node_ip(1);
    return {"XDS_ADDRESS=https://" + host + ":" + std::to_string(kXdsPort),
            "XDS_ROOT_CA=" + root_path(),
            "ALT_XDS_HOSTNAME=istiod.istio-system.svc",
            "CA_ADDRESS=https://" + host + ":" + std::to_string(kCaPort),
            "CA_ROOT_CA=" + root_path(),
            "ALT_CA_HOSTNAME=istiod.istio-system.svc",
            "NODE_NAME=node" + std::to_string(node),
            "CONNECTION_TERMINATION_DEADLINE=1s"};
  }

  /// Agents + proxies (xDS + CA, no local config) on both nodes, pods enrolled, both ready, echo
  /// servers in n2p0 and n1p0.
  void start_nodes(std::map<int, std::vector<std::string>> extra_env = {}) {
    for (int n : {1, 2}) {
      auto agent = fakes::ZdsServer::start((*cluster_).zds_path(n));
      ASSERT_TRUE(agent) << agent.error().message();
      agents_[n].emplace(std::move(*agent));
      auto env = control_plane_env(n);
      env.insert(env.end(), extra_env[n].begin(), extra_env[n].end());
      proxies_[n] = (*cluster_).start_proxy(n, "proxy-node" + std::to_string(n), {}, env, /*local_config=*/false);
      std::string error = replay_snapshot(*agents_[n], {&(*cluster_).pod(n, 0), &(*cluster_).pod(n, 1)});
      ASSERT_EQ(error, "") << "node" << n << " agent";
    }
    for (int n : {1, 2}) {
      ASSERT_TRUE(eventually(seconds(20), [&] { return (*cluster_).readiness(n) == 200; })) << "node" << n << " not ready";
    }
    echo_[2] = (*cluster_).start_echo_server((*cluster_).pod(2, 0), kEchoPort);
    echo_[1] = (*cluster_).start_echo_server((*cluster_).pod(1, 0), kEchoPort);
  }

  /// Every pod in xDS, the fake started with `istiod_args`, both nodes up with `env`.
  void start_all(const std::vector<std::string>& istiod_args = {}, std::map<int, std::vector<std::string>> env = {}) {
    write_resources(all_pods());
    ASSERT_NO_FATAL_FAILURE(start_istiod(istiod_args));
    ASSERT_NO_FATAL_FAILURE(start_nodes(std::move(env)));
  }

  json config_dump(int node) const {
    auto r = (*cluster_).in_netns((*cluster_).node_netns(node),
                                {"curl", "-sS", "-m", "2", "http://127.0.0.1:15000/config_dump"}, seconds(5));
    if (r.exit_code != 0) return json();
    return json::parse(r.out, nullptr, false);
  }
  /// The certificate row of `id` in node's /config_dump (null if none).
  json certificate(int node, const std::string& id) const {
    auto dump = config_dump(node);
    if (!dump.is_object()) return json();
    for (const auto& c : dump["certificates"]) {
      if (c["identity"] == id) return c;
    }
    return json();
  }
  static std::string serial_of(const json& cert) {
    if (!cert.is_object() || cert["certChain"].empty()) return "";
    return cert["certChain"][0]["serialNumber"].get<std::string>();
  }
  bool knows_workload(int node, const std::string& uid) const {
    auto dump = config_dump(node);
    if (!dump.is_object()) return false;
    for (const auto& w : dump["workloads"]) {
      if (w["uid"] == uid) return true;
    }
    return false;
  }
  double opened(int node, const std::vector<std::string>& labels) const {
    return metric_sum((*cluster_).metrics(node), "istio_tcp_connections_opened_total", labels);
  }
  bool round_trip_ok(const ZdsPod& from, const ZdsPod& to) const {
    return (*cluster_).round_trip(from, to, kEchoPort).exit_code == 0;
  }
  std::string log(int node) const { return read_file((*cluster_).workdir() + "/proxy-node" + std::to_string(node) + ".log"); }

  Process istiod_;
  std::map<int, std::optional<fakes::ZdsServer>> agents_;
  std::map<int, Process> proxies_;
  std::map<int, Process> echo_;
};

TEST_F(ControlPlaneTest, PodsKnownOnlyFromXdsTalkBothWaysWithCaCertificatesAndFollowAddAndRemove) {
  ASSERT_NO_FATAL_FAILURE(start_all());
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& b = (*cluster_).pod(2, 0);

  // Outbound on node 1 / inbound on node 2, then the other way round: mutual TLS both times.
  EXPECT_TRUE(round_trip_ok(a, b)) << "n1p0 -> n2p0";
  EXPECT_TRUE(round_trip_ok(b, a)) << "n2p0 -> n1p0";
  const std::string mtls = "connection_security_policy=\"mutual_tls\"";
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return opened(2, {"reporter=\"destination\"", mtls, "source_principal=\"" + identity_of(a) + "\""}) >= 1 &&
           opened(1, {"reporter=\"destination\"", mtls, "source_principal=\"" + identity_of(b) + "\""}) >= 1;
  })) << (*cluster_).metrics(1) << (*cluster_).metrics(2);

  // Every certificate came from the CA: the serials /config_dump shows are ones it issued.
  const std::string calls = command("calls");
  for (auto [node, pod] : {std::pair{1, &a}, std::pair{2, &b}}) {
    auto cert = certificate(node, identity_of(*pod));
    ASSERT_TRUE(cert.is_object()) << "node" << node << " has no certificate for " << identity_of(*pod);
    EXPECT_EQ(cert["state"], "Available");
    EXPECT_EQ(cert["chainLength"], 1);
    const std::string serial = serial_of(cert);
    EXPECT_NE(calls.find("identity=" + identity_of(*pod) + " serial=" + serial), std::string::npos)
        << serial << " not issued by the CA:\n" << calls;
  }
  auto xds = config_dump(1)["xds"];
  EXPECT_EQ(xds["connected"], true) << xds.dump();
  EXPECT_EQ(xds["ready"], true) << xds.dump();
  for (const auto& t : xds["types"]) EXPECT_NE(t["lastAckNonce"], "") << t.dump();

  // Removed from xDS: node 1 no longer knows n2p0, its traffic falls back to passthrough.
  const double mtls_before = opened(1, {"reporter=\"source\"", mtls, "destination_workload=\"n2p0\""});
  write_resources({&a, &(*cluster_).pod(1, 1), &(*cluster_).pod(2, 1)});
  command("reload");
  ASSERT_TRUE(eventually(seconds(10), [&] { return !knows_workload(1, b.uid()); }));
  const double plain_before = opened(1, {"reporter=\"source\"", "connection_security_policy=\"unknown\""});
  EXPECT_TRUE(round_trip_ok(a, b)) << "passthrough n1p0 -> n2p0";
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return opened(1, {"reporter=\"source\"", "connection_security_policy=\"unknown\""}) > plain_before;
  })) << (*cluster_).metrics(1);
  EXPECT_EQ(opened(1, {"reporter=\"source\"", mtls, "destination_workload=\"n2p0\""}), mtls_before);

  // Added back: HBONE again.
  write_resources(all_pods());
  command("reload");
  ASSERT_TRUE(eventually(seconds(10), [&] { return knows_workload(1, b.uid()); }));
  EXPECT_TRUE(round_trip_ok(a, b)) << "HBONE again n1p0 -> n2p0";
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return opened(1, {"reporter=\"source\"", mtls, "destination_workload=\"n2p0\""}) > mtls_before;
  })) << (*cluster_).metrics(1);
}

TEST_F(ControlPlaneTest, PolicyPushClosesLiveConnectionBadResourceNackedByNameUnknownFieldAndEnumTolerated) {
  ASSERT_NO_FATAL_FAILURE(start_all());
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& b = (*cluster_).pod(2, 0);
  Process hold = (*cluster_).start_hold(a, b, kEchoPort, "hold");

  // One response with a bad workload (unknown tunnel protocol), one with an unknown field and an
  // unknown status value, and a policy denying the echo port in the namespace.
  write_resources(all_pods(),
                  "- workload: {uid: bad-one, name: bad, namespace: default, addresses: [\"198.19.9.9\"], "
                  "tunnelProtocol: 7}\n"
                  "- workload: {uid: odd-one, name: odd, namespace: default, addresses: [\"198.19.9.10\"], "
                  "tunnelProtocol: HBONE, status: 42}\n"
                  "  unknownFields: {\"999\": \"from a newer istiod\"}\n"
                  "- authorization: {name: deny-echo, namespace: default, scope: NAMESPACE, action: DENY, "
                  "rules: [{clauses: [{matches: [{destinationPorts: [9000]}]}]}]}\n");
  command("reload");

  // The live connection is re-evaluated against the pushed policy and closed.
  EXPECT_TRUE(hold.wait_for_line("\"closed\"", seconds(10))) << hold.stdout_text();
  EXPECT_FALSE(round_trip_ok(a, b)) << "denied by default/deny-echo";
  EXPECT_TRUE(eventually(seconds(5), [&] { return log(2).find("default/deny-echo") != std::string::npos; }));

  // NACK names the bad resource only; the rest is applied.
  const std::string nacks = command("nacks");
  EXPECT_NE(nacks.find("bad-one: unknown tunnel_protocol 7"), std::string::npos) << nacks;
  EXPECT_EQ(nacks.find("odd-one"), std::string::npos) << nacks;
  for (int n : {1, 2}) {
    EXPECT_TRUE(knows_workload(n, "odd-one")) << "node" << n;
    EXPECT_FALSE(knows_workload(n, "bad-one")) << "node" << n;
    auto types = config_dump(n)["xds"]["types"];
    EXPECT_NE(types[0]["lastNackError"].get<std::string>().find("bad-one"), std::string::npos) << types.dump();
  }
}

TEST_F(ControlPlaneTest, XdsServerRestartReconnectsWithVersionsAndDropsNoConnection) {
  ASSERT_NO_FATAL_FAILURE(start_all());
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& b = (*cluster_).pod(2, 0);
  Process hold = (*cluster_).start_hold(a, b, kEchoPort, "hold");

  command("xds stop");
  ASSERT_TRUE(eventually(seconds(10), [&] { return config_dump(1)["xds"]["connected"] == false; }));
  // Serving from cached state: a new connection still goes over HBONE.
  EXPECT_TRUE(round_trip_ok((*cluster_).pod(1, 1), b)) << "while istiod is down";
  command("xds start");
  ASSERT_TRUE(eventually(seconds(20), [&] {
    auto x = config_dump(1)["xds"];
    return x["connected"] == true && x["streams"].get<int>() >= 2;
  })) << config_dump(1)["xds"].dump();
  ASSERT_TRUE(eventually(seconds(20), [&] { return config_dump(2)["xds"]["streams"].get<int>() >= 2; }));
  // Both proxies told the new server what they hold: 4 workloads and 0 policies (Address only).
  const std::string initial = command("initial");
  EXPECT_NE(initial.find("type=type.googleapis.com/istio.workload.Address versions=4"), std::string::npos) << initial;
  EXPECT_FALSE(hold.count_lines("\"closed\"") > 0) << "held connection dropped: " << hold.stdout_text();
  const int pongs = hold.count_lines("\"pong\"");
  EXPECT_TRUE(eventually(seconds(5), [&] { return hold.count_lines("\"pong\"") > pongs + 5; }));
  EXPECT_EQ(metric_sum((*cluster_).metrics(1), "istio_xds_connection_terminations_total", {}) >= 1, true)
      << (*cluster_).metrics(1);
}

TEST_F(ControlPlaneTest, TwentySecondCertificatesRotateThreeTimesWithoutFailedConnection) {
  ASSERT_NO_FATAL_FAILURE(start_all({"--cert-lifetime", "20"}));
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& b = (*cluster_).pod(2, 0);
  Process loop = (*cluster_).start_in_netns(
      a.netns,
      {"python3", std::string(MESHNODE_SOURCE_DIR) + "/tests/integration/tools/zds_peer.py", "loop", "--host", b.ip,
       "--port", std::to_string(kEchoPort), "--interval", "0.05", "--timeout", "5"},
      "loop", /*stdin_pipe=*/true);
  std::vector<std::string> serials;
  const auto until = steady_clock::now() + seconds(50);
  while (serials.size() < 4 && steady_clock::now() < until) {
    auto cert = certificate(1, identity_of(a));
    const std::string s = serial_of(cert);
    if (!s.empty() && (serials.empty() || serials.back() != s)) {
      EXPECT_EQ(cert["state"], "Available") << cert.dump();
      serials.push_back(s);
      std::printf("rotation: %s serial %s validFrom %s expirationTime %s\n", identity_of(a).c_str(), s.c_str(),
                  cert["certChain"][0]["validFrom"].get<std::string>().c_str(),
                  cert["certChain"][0]["expirationTime"].get<std::string>().c_str());
    }
    std::this_thread::sleep_for(milliseconds(250));
  }
  std::string all;
  for (const auto& s : serials) all += (all.empty() ? "" : " -> ") + s;
  RecordProperty("rotation_serials", all);
  EXPECT_GE(serials.size(), 4U) << "three rotations expected, saw " << all;
  auto summary = finish_loop(loop);
  ASSERT_TRUE(summary) << loop.stdout_text();
  EXPECT_GT(summary->first, 100);
  EXPECT_EQ(summary->second, 0) << "failed connections across the rotations: " << loop.stdout_text().substr(0, 2000);
}

TEST_F(ControlPlaneTest, CaDownCertificatesServeUntilExpiryThenFailClosedAndRecover) {
  ASSERT_NO_FATAL_FAILURE(start_all({"--cert-lifetime", "20"}));
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& a2 = (*cluster_).pod(1, 1);
  ZdsPod& b = (*cluster_).pod(2, 0);
  ASSERT_TRUE(eventually(seconds(10), [&] { return !serial_of(certificate(1, identity_of(a2))).empty(); }));
  const auto issued = certificate(1, identity_of(a2));
  command("ca stop");
  // Past the refresh point (half life) the renewal fails, the valid certificate keeps serving.
  std::this_thread::sleep_for(seconds(12));
  EXPECT_TRUE(round_trip_ok(a, b)) << "still-valid certificates must serve";
  auto row = certificate(1, identity_of(a2));
  EXPECT_EQ(row["state"], "Available") << row.dump();
  EXPECT_GE(row["failures"].get<int>(), 1) << row.dump();
  EXPECT_EQ(serial_of(row), serial_of(issued));
  // After expiry a new HBONE connection (n1p1 never dialled) fails closed, naming the identity.
  ASSERT_TRUE(eventually(seconds(15), [&] {
    return certificate(1, identity_of(a2))["state"].get<std::string>().starts_with("Unavailable");
  })) << certificate(1, identity_of(a2)).dump();
  EXPECT_FALSE(round_trip_ok(a2, b));
  EXPECT_TRUE(eventually(seconds(5), [&] {
    return log(1).find("certificate for " + identity_of(a2) + " expired at") != std::string::npos;
  })) << tail_lines(log(1), 20);
  // The CA comes back: within one backoff step (≤ 8 s × 1.2 at this failure count, + channel
  // reconnect) a fresh certificate serves again.
  command("ca start");
  const auto back = steady_clock::now();
  EXPECT_TRUE(eventually(seconds(25), [&] { return round_trip_ok(a2, b); }));
  const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - back).count();
  std::printf("recovered %lld ms after the CA came back\n", static_cast<long long>(took));
  RecordProperty("recovery_ms", std::to_string(took));
  EXPECT_NE(serial_of(certificate(1, identity_of(a2))), serial_of(issued));
}

TEST_F(ControlPlaneTest, RevokedCertificateIsRefused) {
  const std::string crl = (*cluster_).workdir() + "/ca-crl.pem";
  ASSERT_NO_FATAL_FAILURE(start_all({}, {{2, {"CRL_PATH=" + crl}}}));
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& a2 = (*cluster_).pod(1, 1);
  ZdsPod& b = (*cluster_).pod(2, 0);
  // NODE_NAME prefetch: node 1 holds n1p1's certificate before it ever connects.
  ASSERT_TRUE(eventually(seconds(10), [&] { return !serial_of(certificate(1, identity_of(a2))).empty(); }));
  const std::string revoked = serial_of(certificate(1, identity_of(a2)));
  command("crl " + crl + " " + revoked);
  ASSERT_TRUE(eventually(seconds(10), [&] { return log(2).find("reloaded: 1 CRL") != std::string::npos; }))
      << tail_lines(log(2), 20);
  EXPECT_FALSE(round_trip_ok(a2, b)) << "n1p1's certificate is revoked";
  EXPECT_TRUE(eventually(seconds(5), [&] { return log(2).find("revoked") != std::string::npos; }))
      << tail_lines(log(2), 20);
  EXPECT_TRUE(round_trip_ok(a, b)) << "n1p0's certificate is not revoked";
}

TEST_F(ControlPlaneTest, OnDemandMissSubscribesByAddressAndTimesOutWithAClearReason) {
  ASSERT_NO_FATAL_FAILURE(start_all({}, {{1, {"XDS_ON_DEMAND=true"}}}));
  ZdsPod& a = (*cluster_).pod(1, 0);
  ZdsPod& b = (*cluster_).pod(2, 0);
  ZdsPod& b2 = (*cluster_).pod(2, 1);
  // Node 1 subscribed to no address: it learns n2p0 only when a connection misses it.
  EXPECT_FALSE(knows_workload(1, b.uid()));
  EXPECT_TRUE(round_trip_ok(a, b)) << "n1p0 -> n2p0 after an on-demand lookup";
  EXPECT_TRUE(knows_workload(1, b.uid()));
  EXPECT_FALSE(knows_workload(1, b2.uid()));
  EXPECT_GE(opened(1, {"reporter=\"source\"", "connection_security_policy=\"mutual_tls\"", "destination_workload=\"n2p0\""}),
            1)
      << (*cluster_).metrics(1);
  // istiod away: a miss waits for the lookup's deadline, then the connection fails naming the key.
  command("xds stop");
  ASSERT_TRUE(eventually(seconds(10), [&] { return config_dump(1)["xds"]["connected"] == false; }));
  EXPECT_FALSE(round_trip_ok(a, b2));
  EXPECT_TRUE(eventually(seconds(10), [&] {
    return log(1).find("xDS on-demand lookup of '/" + b2.ip + "' not answered within") != std::string::npos;
  })) << tail_lines(log(1), 20);
  EXPECT_TRUE(round_trip_ok(a, b)) << "what was looked up keeps serving";
}

}  // namespace
}  // namespace meshnode::integration
