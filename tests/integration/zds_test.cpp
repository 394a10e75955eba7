// In-pod lifecycle over ZDS (issue 3, Tests): shared-mode meshnode-proxy processes fed by fake node
// agents (tests/fakes ZdsServer) on the simulated two-node cluster; real pod netns fds over
// SCM_RIGHTS, real listeners checked from inside the pods, real HBONE traffic between the nodes.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <random>
#include <sstream>

#include "integration/zds_fixture.hpp"

namespace meshnode::integration {
namespace {

using std::chrono::duration;
using std::chrono::steady_clock;
namespace zds = nodeapi::zds;

constexpr int kEchoPort = 9000;
const std::set<int> kPodPorts = {15001, 15006, 15008};

bool has_pod_listeners(const std::set<int>& ports) {
  return std::ranges::all_of(kPodPorts, [&](int p) { return ports.contains(p); });
}
bool has_no_pod_listeners(const std::set<int>& ports) {
  return std::ranges::none_of(kPodPorts, [&](int p) { return ports.contains(p); });
}
std::string show(const std::set<int>& ports) {
  std::string s;
  for (int p : ports) s += std::to_string(p) + " ";
  return s;
}

double mono_now() { return duration<double>(steady_clock::now().time_since_epoch()).count(); }

class ZdsTest : public ZdsClusterTest {
 protected:
  /// Starts a fake agent and a shared-mode proxy per node; node 1 gets `node1_pods`, node 2 its
  /// pod 0 (the echo server's pod), each as one snapshot. Waits for both readiness 200.
  void start_nodes(const std::vector<ZdsPod*>& node1_pods, const std::vector<std::string>& node1_env = {}) {
    for (int n : {1, 2}) {
      auto agent = fakes::ZdsServer::start(cluster().zds_path(n));
      ASSERT_TRUE(agent) << agent.error().message();
      agents_[n].emplace(std::move(*agent));
    }
    // Sequential: the first proxy creates the shared CA before it connects to its agent.
    proxies_[1] = cluster().start_proxy(1, "proxy-node1", {}, node1_env);
    std::string error = replay_snapshot(*agents_[1], node1_pods);
    ASSERT_EQ(error, "") << "node1 agent";
    proxies_[2] = cluster().start_proxy(2, "proxy-node2");
    error = replay_snapshot(*agents_[2], {&server()});
    ASSERT_EQ(error, "") << "node2 agent";
    for (int n : {1, 2}) {
      ASSERT_TRUE(eventually(seconds(20), [&] { return cluster().readiness(n) == 200; })) << "node" << n << " not ready";
    }
    echo_ = cluster().start_echo_server(server(), kEchoPort);
  }
  ZdsPod& server() { return cluster().pod(2, 0); }
  void expect_round_trip(const ZdsPod& from) {
    auto r = cluster().round_trip(from, server(), kEchoPort);
    EXPECT_EQ(r.exit_code, 0) << from.name << " -> " << server().name << ": " << r.describe();
  }

  std::map<int, std::optional<fakes::ZdsServer>> agents_;
  std::map<int, Process> proxies_;
  Process echo_;
};

// ---- add / del / repeated add ------------------------------------------------------------------

TEST_F(ZdsTest, AddStartsListenersInPodNetnsAndDelRemovesThemAndClosesConnections) {
  ZdsPod& client = cluster().pod(1, 0);
  ASSERT_TRUE(has_no_pod_listeners(cluster().listening_ports(client.netns)));
  ASSERT_NO_FATAL_FAILURE(start_nodes({&client}));

  // Add: the listeners exist inside the pod's own netns (seen from inside it).
  std::set<int> ports;
  EXPECT_TRUE(eventually(seconds(10), [&] { return has_pod_listeners(ports = cluster().listening_ports(client.netns)); }))
      << "listening in " << client.netns << ": " << show(ports);
  EXPECT_TRUE(has_pod_listeners(cluster().listening_ports(server().netns)));

  // Traffic flows, over HBONE with the identities of the agent-enrolled pods.
  expect_round_trip(client);
  EXPECT_TRUE(eventually(seconds(10), [&] {
    return metric_sum(cluster().metrics(2), "istio_tcp_connections_opened_total",
                      {"reporter=\"destination\"", "connection_security_policy=\"mutual_tls\"",
                       "source_principal=\"spiffe://cluster.local/ns/default/sa/n1p0\"",
                       "destination_principal=\"spiffe://cluster.local/ns/default/sa/n2p0\""}) >= 1;
  })) << "node2 metrics:\n" << cluster().metrics(2);

  // A repeated Add of the same pod is a no-op: empty Ack, the open connection survives, the
  // listeners are not restarted. Both the same fd and a fresh fd of the same netns.
  Process hold = cluster().start_hold(client, server(), kEchoPort, "hold-client");
  const double started_before = metric_sum(cluster().metrics(1), "workload_manager_proxies_started_total", {});
  base::UniqueFd reopened(::open(("/var/run/netns/" + client.netns).c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(reopened.valid());
  for (int fd : {client.fd.get(), reopened.get()}) {
    ASSERT_TRUE(agents_[1]->add(client.uid(), client.info(), fd));
    auto ack = agents_[1]->read_ack(fakes::in(seconds(5)));
    ASSERT_TRUE(ack) << ack.error().message();
    EXPECT_EQ(*ack, "") << "a repeated Add must be acked without error";
  }
  const int pongs = count_events(hold, "pong");
  EXPECT_TRUE(eventually(seconds(5), [&] { return count_events(hold, "pong") >= pongs + 5; }))
      << "the held connection stopped echoing after a repeated Add: " << hold.stdout_text();
  EXPECT_EQ(count_events(hold, "closed"), 0) << hold.stdout_text();
  EXPECT_EQ(metric_sum(cluster().metrics(1), "workload_manager_proxies_started_total", {}), started_before)
      << "a repeated Add restarted the pod's listeners";
  EXPECT_EQ(cluster().readiness(1), 200);

  // Del: listeners gone from the netns, the open connection closed.
  ASSERT_TRUE(agents_[1]->del(client.uid()));
  auto ack = agents_[1]->read_ack(fakes::in(seconds(5)));
  ASSERT_TRUE(ack) << ack.error().message();
  EXPECT_EQ(*ack, "");
  EXPECT_TRUE(eventually(seconds(10), [&] { return has_no_pod_listeners(ports = cluster().listening_ports(client.netns)); }))
      << "still listening in " << client.netns << " after Del: " << show(ports);
  EXPECT_TRUE(hold.wait_for_line("\"closed\"", seconds(10)))
      << "the pod's open connection survived its Del: " << hold.stdout_text();
  // With nobody on 15001 the pod's redirected connections are refused now.
  auto r = cluster().round_trip(client, server(), kEchoPort);
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(proxies_[1].running());
}

// ---- snapshot reconcile ----------------------------------------------------------------------------

class ZdsReconcileTest : public ZdsTest {
 protected:
  int pods_per_node() const override { return 3; }
};

TEST_F(ZdsReconcileTest, ReconnectSnapshotDrainsUnmentionedPodAndKeepsOthersServing) {
  ZdsPod& a = cluster().pod(1, 0);
  ZdsPod& b = cluster().pod(1, 1);
  ZdsPod& c = cluster().pod(1, 2);
  ASSERT_NO_FATAL_FAILURE(start_nodes({&a, &b, &c}));
  for (auto* p : {&a, &b, &c}) {
    ASSERT_TRUE(eventually(seconds(10), [&] { return has_pod_listeners(cluster().listening_ports(p->netns)); })) << p->name;
    expect_round_trip(*p);
  }
  Process hold = cluster().start_hold(a, server(), kEchoPort, "hold-a");

  // The agent drops the connection; the proxy reconnects (backoff from 10 ms, at most 15 s).
  auto& agent = *agents_[1];
  agent.close_client();
  const auto dropped = steady_clock::now();
  ASSERT_TRUE(agent.accept_client(fakes::in(seconds(20)))) << "the proxy did not reconnect within 20 s";
  const auto reconnect_ms = std::chrono::duration_cast<milliseconds>(steady_clock::now() - dropped).count();
  std::printf("proxy reconnected %lld ms after the agent closed the connection\n", static_cast<long long>(reconnect_ms));
  EXPECT_LE(reconnect_ms, 15'000);
  ASSERT_TRUE(agent.expect_hello(fakes::in(seconds(5))));
  EXPECT_EQ(cluster().readiness(1), 500) << "not ready until the new snapshot is complete";
  ASSERT_TRUE(agent.add(a.uid(), a.info(), a.fd.get()));
  auto ack = agent.read_ack(fakes::in(seconds(5)));
  ASSERT_TRUE(ack) << ack.error().message();
  EXPECT_EQ(*ack, "");
  ASSERT_TRUE(agent.keep(b.uid()));
  ack = agent.read_ack(fakes::in(seconds(5)));
  ASSERT_TRUE(ack) << ack.error().message();
  EXPECT_EQ(*ack, "");
  ASSERT_TRUE(agent.snapshot_sent());
  ack = agent.read_ack(fakes::in(seconds(5)));
  ASSERT_TRUE(ack) << ack.error().message();
  EXPECT_EQ(*ack, "");

  // C (mentioned by neither Add nor Keep) is drained; A and B keep serving.
  std::set<int> ports;
  EXPECT_TRUE(eventually(seconds(10), [&] { return has_no_pod_listeners(ports = cluster().listening_ports(c.netns)); }))
      << "C still listening after the snapshot: " << show(ports);
  EXPECT_TRUE(has_pod_listeners(ports = cluster().listening_ports(a.netns))) << show(ports);
  EXPECT_TRUE(has_pod_listeners(ports = cluster().listening_ports(b.netns))) << show(ports);
  expect_round_trip(a);
  expect_round_trip(b);
  EXPECT_NE(cluster().round_trip(c, server(), kEchoPort).exit_code, 0) << "C must not be served any more";
  // The connection held through A across the reconnect still echoes.
  const int pongs = count_events(hold, "pong");
  EXPECT_TRUE(eventually(seconds(5), [&] { return count_events(hold, "pong") >= pongs + 5; })) << hold.stdout_text();
  EXPECT_EQ(count_events(hold, "closed"), 0) << "A's open connection was dropped: " << hold.stdout_text();
  EXPECT_TRUE(eventually(seconds(10), [&] { return cluster().readiness(1) == 200; }));
}

// ---- bad input ---------------------------------------------------------------------------------

struct BadFrame {
  std::string what;
  std::string bytes;
  std::vector<int> fds;
};

std::string random_bytes(std::mt19937& rng, std::size_t n) {
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(rng() & 0xff);
  return s;
}

std::string request_bytes(const std::function<void(zds::WorkloadRequest&)>& fill) {
  zds::WorkloadRequest req;
  fill(req);
  return req.SerializeAsString();
}

TEST_F(ZdsTest, MalformedFramesGetErrorAckOrReconnectAndPodsKeepServing) {
  ZdsPod& a = cluster().pod(1, 0);
  ZdsPod& b = cluster().pod(1, 1);
  ASSERT_NO_FATAL_FAILURE(start_nodes({&a, &b}));
  Process hold = cluster().start_hold(a, server(), kEchoPort, "hold-a");
  base::UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(devnull.valid());

  std::mt19937 rng(20240603);  // fixed seed: the same "random" frames every run
  const std::string valid_add = request_bytes([&](auto& r) {
    r.mutable_add()->set_uid(a.uid());
    *r.mutable_add()->mutable_workload_info() = a.info();
  });
  const std::vector<BadFrame> frames = {
      {"random 16 bytes", random_bytes(rng, 16), {}},
      {"random 200 bytes", random_bytes(rng, 200), {}},
      {"random 1000 bytes with an fd", random_bytes(rng, 1000), {a.fd.get()}},
      {"endless varint", std::string(12, '\xff'), {}},
      {"add (field 1) as a varint", std::string("\x08\x01", 2), {}},
      {"del (field 2) as fixed64", std::string("\x11\x01\x02\x03\x04\x05\x06\x07\x08", 9), {}},
      {"only an unknown field (no payload)", std::string("\x78\x01", 2), {}},
      {"unknown oneof member 4", std::string("\x22\x00", 2), {}},
      {"add with two fds", valid_add, {a.fd.get(), b.fd.get()}},
      {"add without fd", valid_add, {}},
      {"del of a live pod with an fd", request_bytes([&](auto& r) { r.mutable_del()->set_uid(b.uid()); }), {b.fd.get()}},
      {"keep with an fd", request_bytes([&](auto& r) { r.mutable_keep()->set_uid(b.uid()); }), {b.fd.get()}},
      {"snapshot_sent with an fd", request_bytes([](auto& r) { r.mutable_snapshot_sent(); }), {a.fd.get()}},
      {"oversized add (100 KiB uid)",
       request_bytes([&](auto& r) {
         r.mutable_add()->set_uid(std::string(100 * 1024, 'u'));
         *r.mutable_add()->mutable_workload_info() = a.info();
       }),
       {a.fd.get()}},
      {"oversized random (64 KiB + 1)", random_bytes(rng, 64 * 1024 + 1), {}},
      {"add without WorkloadInfo", request_bytes([&](auto& r) { r.mutable_add()->set_uid("cluster1//v1/Pod/default/x"); }),
       {a.fd.get()}},
      {"add with an empty uid", request_bytes([&](auto& r) { *r.mutable_add()->mutable_workload_info() = a.info(); }),
       {b.fd.get()}},
      {"truncated add", valid_add.substr(0, valid_add.size() / 2), {a.fd.get()}},
      {"empty packet", "", {}},
      {"add with a non-netns fd (/dev/null)",
       request_bytes([&](auto& r) {
         r.mutable_add()->set_uid("cluster1//v1/Pod/default/not-a-netns");
         *r.mutable_add()->mutable_workload_info() = a.info();
       }),
       {devnull.get()}},
  };
  ASSERT_EQ(frames.size(), 20u);

  auto& agent = *agents_[1];
  int error_acks = 0;
  int reconnects = 0;
  for (const auto& frame : frames) {
    SCOPED_TRACE(frame.what);
    ASSERT_TRUE(agent.send_raw(frame.bytes, std::span<const int>(frame.fds)));
    auto ack = agent.read_ack(fakes::in(seconds(5)));
    std::string outcome;
    if (ack) {
      EXPECT_NE(*ack, "") << "a malformed frame was acked as success";
      outcome = "Ack{error=\"" + *ack + "\"}";
      ++error_acks;
    } else {
      EXPECT_EQ(ack.error().code, base::Errc::kClosed) << ack.error().message();
      outcome = "disconnected without Ack";
    }
    // Still connected? A Keep of a live pod is harmless and acked "" on a live session.
    bool connected = false;
    if (agent.keep(a.uid())) {
      auto probe = agent.read_ack(fakes::in(seconds(5)));
      connected = probe && probe->empty();
    }
    if (!connected) {
      const std::string error = replay_snapshot(agent, {&a, &b});
      ASSERT_EQ(error, "") << "the proxy did not come back after " << frame.what;
      ++reconnects;
      outcome += ", reconnected";
    }
    std::printf("  %-40s -> %s\n", frame.what.c_str(), outcome.substr(0, 140).c_str());
    ASSERT_TRUE(proxies_[1].running()) << "the proxy died on " << frame.what;
  }
  std::printf("20 malformed frames: %d error Acks, %d reconnects\n", error_acks, reconnects);

  EXPECT_TRUE(proxies_[1].running());
  expect_round_trip(a);
  expect_round_trip(b);
  const int pongs = count_events(hold, "pong");
  EXPECT_TRUE(eventually(seconds(5), [&] { return count_events(hold, "pong") >= pongs + 5; })) << hold.stdout_text();
  EXPECT_EQ(count_events(hold, "closed"), 0) << hold.stdout_text();
  EXPECT_TRUE(has_pod_listeners(cluster().listening_ports(a.netns)));
  EXPECT_TRUE(has_pod_listeners(cluster().listening_ports(b.netns)));
  EXPECT_TRUE(eventually(seconds(10), [&] { return cluster().readiness(1) == 200; }))
      << "readiness " << cluster().readiness(1);
}

// ---- restart hand-off ----------------------------------------------------------------------------

/// tools/zds_peer.py `loop` from `from` to the echo server: a new connection every 10 ms until
/// its stdin closes.
Process start_loop(ZdsCluster& c, const ZdsPod& from, const ZdsPod& to, const std::string& label) {
  return c.start_in_netns(from.netns,
                          {"python3", std::string(MESHNODE_SOURCE_DIR) + "/tests/integration/tools/zds_peer.py", "loop",
                           "--host", to.ip, "--port", std::to_string(kEchoPort), "--interval", "0.01", "--timeout", "5"},
                          label, /*stdin_pipe=*/true);
}

TEST_F(ZdsTest, RestartHandoffLosesNoNewConnectionAndClosesOldOnesAtDeadline) {
  ZdsPod& client = cluster().pod(1, 0);
  ASSERT_NO_FATAL_FAILURE(start_nodes({&client}, {"CONNECTION_TERMINATION_DEADLINE=2s"}));
  Process hold = cluster().start_hold(client, server(), kEchoPort, "hold-old");
  Process loop = start_loop(cluster(), client, server(), "loop");
  ASSERT_TRUE(eventually(seconds(20), [&] { return last_field(loop, "progress", "ok") >= 100; }))
      << "the client loop does not get through: " << loop.stdout_text() << loop.stderr_text();

  // A second proxy for the same node: the agent keeps the first connection and replays the pods
  // to the newcomer (both bind the pod's ports with SO_REUSEPORT).
  auto& agent = *agents_[1];
  base::UniqueFd first_connection = agent.release_client();
  const ProxyPorts second_ports{.admin = 15100, .metrics = 15120, .readiness = 15121};
  Process second = cluster().start_proxy(1, "proxy-node1-second", second_ports, {"CONNECTION_TERMINATION_DEADLINE=2s"});
  ASSERT_EQ(replay_snapshot(agent, {&client}), "");
  ASSERT_TRUE(eventually(seconds(20), [&] { return cluster().readiness(1, second_ports) == 200; }))
      << "the second proxy did not get ready";
  const double ok_before = last_field(loop, "progress", "ok");
  ASSERT_TRUE(eventually(seconds(10), [&] { return last_field(loop, "progress", "ok") >= ok_before + 50; }));

  // SIGTERM the first: listeners close at once, its connections get 2 s.
  const double sigterm_at = mono_now();
  proxies_[1].signal(SIGTERM);
  const auto code = proxies_[1].wait_for(seconds(10));
  ASSERT_TRUE(code.has_value()) << "the first proxy did not exit within 10 s of SIGTERM";
  EXPECT_EQ(*code, 0);
  first_connection.reset();
  ASSERT_TRUE(hold.wait_for_line("\"closed\"", seconds(5))) << "the old connection outlived the first proxy";
  const double closed_after = last_field(hold, "closed", "mono") - sigterm_at;
  std::printf("old connection closed %.3f s after SIGTERM (deadline 2 s)\n", closed_after);
  EXPECT_NEAR(closed_after, 2.0, 1.0) << hold.stdout_text();

  // Keep the loop going through the second proxy alone for a while, then stop it.
  const double ok_after_exit = last_field(loop, "progress", "ok");
  EXPECT_TRUE(eventually(seconds(10), [&] { return last_field(loop, "progress", "ok") >= ok_after_exit + 100; }));
  auto summary = finish_loop(loop);
  ASSERT_TRUE(summary) << loop.stdout_text() << loop.stderr_text();
  std::printf("restart hand-off: %ld new connections attempted, %ld failed\n", summary->first, summary->second);
  EXPECT_EQ(summary->second, 0) << "failed connections:\n" << loop.stdout_text().substr(0, 4000);
  EXPECT_TRUE(second.running());
  EXPECT_TRUE(has_pod_listeners(cluster().listening_ports(client.netns)));
}

// ---- agent restart --------------------------------------------------------------------------------

TEST_F(ZdsTest, AgentAwayForTenSecondsTrafficNeverStopsAndReadinessRecovers) {
  ZdsPod& client = cluster().pod(1, 0);
  ASSERT_NO_FATAL_FAILURE(start_nodes({&client}));
  Process loop = start_loop(cluster(), client, server(), "loop");
  ASSERT_TRUE(eventually(seconds(20), [&] { return last_field(loop, "progress", "ok") >= 100; }))
      << loop.stdout_text() << loop.stderr_text();
  ASSERT_EQ(cluster().readiness(1), 200);

  // The agent goes away (listener and socket file gone, connection closed) ...
  agents_[1].reset();
  const auto gone = steady_clock::now();
  EXPECT_TRUE(eventually(seconds(5), [&] { return cluster().readiness(1) == 500; }))
      << "readiness must report the lost ZDS connection";
  // ... for 10 s (a deliberate wait), polling readiness meanwhile: not ready the whole time.
  int not_ready_polls = 0;
  int ready_polls = 0;
  while (steady_clock::now() - gone < seconds(10)) {
    (cluster().readiness(1) == 500 ? not_ready_polls : ready_polls)++;
    std::this_thread::sleep_for(milliseconds(250));
  }
  EXPECT_EQ(ready_polls, 0) << "ready while the agent was away";
  const double ok_while_away = last_field(loop, "progress", "ok");

  // ... and comes back on the same path: the proxy reconnects (backoff ≤ 15 s) and gets ready.
  auto agent = fakes::ZdsServer::start(cluster().zds_path(1));
  ASSERT_TRUE(agent) << agent.error().message();
  agents_[1].emplace(std::move(*agent));
  const auto back = steady_clock::now();
  ASSERT_EQ(replay_snapshot(*agents_[1], {&client}, seconds(20)), "") << "no reconnect within 20 s";
  std::printf("proxy reconnected %lld ms after the agent came back (away 10 s)\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(steady_clock::now() - back).count()));
  EXPECT_TRUE(eventually(seconds(10), [&] { return cluster().readiness(1) == 200; }));
  EXPECT_TRUE(eventually(seconds(10), [&] { return last_field(loop, "progress", "ok") >= ok_while_away + 50; }));
  auto summary = finish_loop(loop);
  ASSERT_TRUE(summary) << loop.stdout_text() << loop.stderr_text();
  std::printf("agent restart: %ld connections attempted, %ld failed; readiness polls while away: %d x 500\n",
              summary->first, summary->second, not_ready_polls);
  EXPECT_EQ(summary->second, 0) << loop.stdout_text().substr(0, 4000);
  EXPECT_GT(not_ready_polls, 0);
}

// ---- a pod only ZDS knows (issue 11, defect 0) -------------------------------------------------

class ZdsPodNotInConfigTest : public ZdsTest {
 protected:
  std::set<std::string> pods_not_in_config() const override { return {"n1p0"}; }
};

// The normal case in a cluster: the agent enrolls a pod the proxy's config does not list. Its
// identity is the one ZDS's WorkloadInfo gives (trust domain cluster.local) and its IPs are its
// netns' own. It used to abort node 1's proxy (double free) on the pod's first outbound connection.
TEST_F(ZdsPodNotInConfigTest, OutboundOfPodKnownOnlyFromZdsUsesItsZdsIdentityAndIp) {
  ZdsPod& client = cluster().pod(1, 0);
  ASSERT_NO_FATAL_FAILURE(start_nodes({&client}));
  ASSERT_TRUE(eventually(seconds(10), [&] { return has_pod_listeners(cluster().listening_ports(client.netns)); }));

  for (int i = 0; i < 3; ++i) expect_round_trip(client);
  EXPECT_TRUE(proxies_[1].running()) << "node 1's proxy died serving a pod that is not in its config";
  EXPECT_EQ(cluster().readiness(1), 200);

  const std::string zds_identity = "source_principal=\"spiffe://cluster.local/ns/default/sa/n1p0\"";
  EXPECT_TRUE(eventually(seconds(10), [&] {
    return metric_sum(cluster().metrics(1), "istio_tcp_connections_opened_total",
                      {"reporter=\"source\"", "source_workload=\"n1p0\"", zds_identity,
                       "connection_security_policy=\"mutual_tls\"",
                       "destination_principal=\"spiffe://cluster.local/ns/default/sa/n2p0\""}) >= 3;
  })) << "node1 metrics:\n" << cluster().metrics(1);
  EXPECT_EQ(metric_sum(cluster().metrics(1), "istio_tcp_connections_failed_total", {"reporter=\"source\""}), 0)
      << cluster().metrics(1);
  // Node 2 verified the certificate node 1 presented for the pod: the identity ZDS gave it.
  EXPECT_TRUE(eventually(seconds(10), [&] {
    return metric_sum(cluster().metrics(2), "istio_tcp_connections_opened_total",
                      {"reporter=\"destination\"", zds_identity, "connection_security_policy=\"mutual_tls\""}) >= 3;
  })) << "node2 metrics:\n" << cluster().metrics(2);
  // ... and saw the connections come from the pod's own IP (the socket is made in its netns).
  const std::string node2_log = read_file(cluster().workdir() + "/proxy-node2.log");
  EXPECT_NE(node2_log.find("src.addr=" + client.ip + ":"), std::string::npos) << tail_lines(node2_log, 20);
}

}  // namespace
}  // namespace meshnode::integration
