// The proxy's paths end to end without root (issue 10): outbound HBONE to inbound, plain TCP and
// passthrough routes, socks5, inbound plaintext policy, live policy re-checks and aborts, and the
// refusal path that once aborted the proxy (issue 11 defect 0).
#include <fcntl.h>

#include <array>
#include <atomic>
#include <string>
#include <thread>

#include "unit/proxy/direct_harness.hpp"

namespace meshnode::proxy::testing {
namespace {

constexpr std::uint8_t kClient = 1;
constexpr std::uint8_t kServer = 2;
constexpr std::uint8_t kLegacy = 3;
constexpr std::uint8_t kOutside = 9;
constexpr std::uint8_t kEmptyVip = 100;

state::Workload workload(std::string uid, std::string name, std::string sa, const base::IpAddr& ip,
                         state::TunnelProtocol protocol = state::TunnelProtocol::kHbone) {
  state::Workload w;
  w.uid = std::move(uid);
  w.name = std::move(name);
  w.ns = "default";
  w.service_account = std::move(sa);
  w.addresses = {ip};
  w.protocol = protocol;
  return w;
}

state::Authorization deny(std::string name, state::Match match) {
  state::Authorization p;
  p.name = std::move(name);
  p.ns = "default";
  p.scope = state::Authorization::Scope::kNamespace;
  p.action = state::Authorization::Action::kDeny;
  p.rules = {state::Rule{{state::Clause{{std::move(match)}}}}};
  return p;
}

class DirectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    app_ = std::make_unique<EchoServer>(base::SocketAddr{proxy_.ip(kServer), 0});
    legacy_app_ = std::make_unique<EchoServer>(base::SocketAddr{proxy_.ip(kLegacy), 0});
    outside_app_ = std::make_unique<EchoServer>(base::SocketAddr{proxy_.ip(kOutside), 0});
    client_ = workload("cluster1//v1/Pod/default/client", "client", "client", proxy_.ip(kClient));
    server_ = workload("cluster1//v1/Pod/default/server", "server", "server", proxy_.ip(kServer));
    legacy_ = workload("cluster1//v1/Pod/default/legacy", "legacy", "legacy", proxy_.ip(kLegacy),
                       state::TunnelProtocol::kNone);
  }

  /// Publishes a snapshot of `workloads` (default: client, server, legacy), the endpoint-less
  /// service "empty" on 127.a.b.100:80, and `policies`.
  std::shared_ptr<const state::StateSnapshot> publish(std::vector<state::Authorization> policies = {},
                                                      std::optional<std::vector<state::Workload>> workloads = {}) {
    state::Service empty;
    empty.name = "empty";
    empty.ns = "default";
    empty.hostname = "empty.default.svc.cluster.local";
    empty.vips = {{"", proxy_.ip(kEmptyVip)}};
    empty.ports = {{80, 8080}};
    auto snapshot = state::StateSnapshot::build(workloads.value_or(std::vector{client_, server_, legacy_}), {empty},
                                                std::move(policies));
    EXPECT_TRUE(snapshot) << snapshot.error().message();
    proxy_.publish(snapshot.value());
    return *snapshot;
  }
  void start_pods() {
    proxy_.start_pod(client_, proxy_.ip(kClient));
    proxy_.start_pod(server_, proxy_.ip(kServer));
  }
  [[nodiscard]] base::SocketAddr outbound() const { return proxy_.listener(proxy_.ip(kClient), 15001); }
  [[nodiscard]] base::SocketAddr app() const { return app_->address(); }
  Exchange via_outbound(const base::SocketAddr& orig_dst, std::string_view bytes) {
    return round_trip(proxy_.sockets(), proxy_.ip(kClient), outbound(), orig_dst, bytes);
  }
  /// A connection through the client pod's outbound listener to the app that echoed `first`;
  /// invalid (and a test failure) otherwise.
  base::UniqueFd held_connection(std::string_view first) {
    auto fd = connect_from(proxy_.sockets(), proxy_.ip(kClient), outbound(), app());
    Exchange r;
    if (fd && send_all(fd.get(), first)) read_into(fd.get(), r, first.size());
    EXPECT_EQ(r.received, first) << "no echo through the held connection";
    return r.received == first ? std::move(fd) : base::UniqueFd();
  }
  double metric(const std::string& name, const std::vector<std::string>& labels) {
    return metric_sum(proxy_.metrics(), name, labels);
  }

  DirectProxy proxy_;
  std::unique_ptr<EchoServer> app_;
  std::unique_ptr<EchoServer> legacy_app_;
  std::unique_ptr<EchoServer> outside_app_;
  state::Workload client_;
  state::Workload server_;
  state::Workload legacy_;
};

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

TEST_F(DirectTest, OutboundHboneReachesTheAppIntactWithBothIdentitiesCountedAtBothEnds) {
  publish();
  start_pods();
  const std::string bytes = pattern(300 * 1024);
  Exchange r = via_outbound(app(), bytes);
  ASSERT_TRUE(r.connected);
  EXPECT_TRUE(r.eof) << "half-close must come back as a FIN";
  EXPECT_EQ(r.received.size(), bytes.size());
  EXPECT_TRUE(r.received == bytes) << "bytes changed in transit";
  const std::vector<std::string> both = {"connection_security_policy=\"mutual_tls\"",
                                         "source_principal=\"spiffe://cluster.local/ns/default/sa/client\"",
                                         "destination_principal=\"spiffe://cluster.local/ns/default/sa/server\""};
  EXPECT_TRUE(eventually([&] {
    auto source = both;
    source.push_back("reporter=\"source\"");
    auto destination = both;
    destination.push_back("reporter=\"destination\"");
    return metric("istio_tcp_connections_closed_total", source) == 1 &&
           metric("istio_tcp_connections_closed_total", destination) == 1 &&
           metric("istio_tcp_received_bytes_total", destination) == static_cast<double>(bytes.size());
  })) << proxy_.metrics();
  EXPECT_EQ(metric("istio_tcp_connections_failed_total", {}), 0);
}

/// Connects through the client pod's outbound listener and sends `bytes` (then FIN) while the
/// proxy's worker thread is held, so the proxy first sees the connection with every byte already
/// in its socket: the bytes an HBONE route sends behind its CONNECT. Reads the answer.
Exchange sent_before_the_tunnel(DirectProxy& proxy, const base::IpAddr& from, const base::SocketAddr& listener,
                                const base::SocketAddr& app, std::string_view bytes) {
  std::atomic<bool> held{false};
  std::atomic<bool> release{false};
  std::thread holder([&] {
    proxy.on_worker(0, [&](PodWorker&) {
      held = true;
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
  });
  // Only once the worker is held: else it could accept and route the connection first.
  EXPECT_TRUE(eventually([&] { return held.load(); }));
  Exchange out;
  auto fd = connect_from(proxy.sockets(), from, listener, app);
  out.connected = fd.valid();
  // Non-blocking: bytes the kernel cannot hold for a connection not yet accepted must fail the
  // test, not hang it with the worker held.
  if (fd) {
    const int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
    const bool all = send_all(fd.get(), bytes);
    EXPECT_TRUE(all) << "the kernel did not take " << bytes.size() << " B before the accept";
    ::fcntl(fd.get(), F_SETFL, flags);
    if (all) ::shutdown(fd.get(), SHUT_WR);
  }
  release = true;
  holder.join();
  if (fd) read_into(fd.get(), out);
  return out;
}

TEST_F(DirectTest, BytesSentBeforeTheTunnelIsUpArriveIntactAndAreCounted) {
  publish();
  start_pods();
  // Less than the 4 KiB that ride with the CONNECT, then more than that.
  for (const std::size_t size : {std::size_t{1000}, std::size_t{70'000}}) {
    const std::string bytes = pattern(size);
    const double before = metric("istio_tcp_received_bytes_total", {"reporter=\"source\""});
    Exchange r = sent_before_the_tunnel(proxy_, proxy_.ip(kClient), outbound(), app(), bytes);
    ASSERT_TRUE(r.connected);
    EXPECT_TRUE(r.eof) << "half-close must come back as a FIN";
    EXPECT_TRUE(r.received == bytes) << size << " B: " << r.received.size() << " B came back, or changed in transit";
    EXPECT_TRUE(eventually([&] {
      return metric("istio_tcp_received_bytes_total", {"reporter=\"source\""}) == before + static_cast<double>(size);
    })) << "the source's client -> server byte count must include what was sent with the CONNECT\n"
        << proxy_.metrics();
  }
  EXPECT_EQ(metric("istio_tcp_connections_failed_total", {}), 0);
}

TEST_F(DirectTest, BytesSentBeforeADeniedTunnelNeverReachTheApp) {
  state::Match port;
  port.destination_ports = {app().port};
  publish({deny("deny-app-port", port)});
  start_pods();
  Exchange r = sent_before_the_tunnel(proxy_, proxy_.ip(kClient), outbound(), app(), "GET /secret HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r.connected);
  EXPECT_TRUE(r.received.empty());
  EXPECT_TRUE(r.reset || r.eof) << "the denied connection stayed open";
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_failed_total", {"reporter=\"source\"", "response_flags=\"DENY\""}) == 1;
  })) << proxy_.metrics();
  EXPECT_EQ(app_->accepted(), 0) << "a denied connection, or its early bytes, reached the app";
}

// Issue 11 defect 0, without root: the client pod is not in the snapshot (enrolled from ZDS's
// WorkloadInfo only). Its connections are served with the identity it was enrolled as.
TEST_F(DirectTest, PodMissingFromTheSnapshotIsServedAsTheWorkloadItWasEnrolledAs) {
  publish({}, std::vector{server_});
  state::Workload enrolled = workload("cluster1//v1/Pod/default/zds-only", "zds-only", "from-zds", proxy_.ip(kClient));
  enrolled.workload_type = "pod";
  proxy_.start_pod(enrolled, proxy_.ip(kClient));
  proxy_.start_pod(server_, proxy_.ip(kServer));
  for (int i = 0; i < 3; ++i) {
    Exchange r = via_outbound(app(), "ping " + std::to_string(i));
    EXPECT_EQ(r.received, "ping " + std::to_string(i));
  }
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_closed_total",
                  {"reporter=\"destination\"", "source_principal=\"spiffe://cluster.local/ns/default/sa/from-zds\""}) == 3;
  })) << proxy_.metrics();
  EXPECT_EQ(metric("istio_tcp_connections_failed_total", {}), 0) << proxy_.metrics();
}

TEST_F(DirectTest, ServiceWithoutEndpointsIsRefusedOnceCountedAndTheProxyKeepsServing) {
  publish();
  start_pods();
  Exchange refused = via_outbound({proxy_.ip(kEmptyVip), 80}, "hello");
  EXPECT_TRUE(refused.received.empty());
  EXPECT_TRUE(refused.reset || refused.eof);
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_failed_total", {"reporter=\"source\"", "response_flags=\"CONNECT\""}) == 1 &&
           metric("istio_tcp_connections_opened_total", {"reporter=\"source\""}) == 1;
  })) << proxy_.metrics();
  // The next connection is unaffected.
  EXPECT_EQ(via_outbound(app(), "still here").received, "still here");
}

TEST_F(DirectTest, PlainTcpWorkloadsAndAddressesOutsideTheMeshAreCarriedWithoutHbone) {
  publish();
  start_pods();
  EXPECT_EQ(via_outbound(legacy_app_->address(), "to legacy").received, "to legacy");
  EXPECT_EQ(via_outbound(outside_app_->address(), "outside").received, "outside");
  EXPECT_EQ(legacy_app_->accepted(), 1);
  EXPECT_EQ(outside_app_->accepted(), 1);
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_closed_total",
                  {"reporter=\"source\"", "connection_security_policy=\"unknown\"", "response_flags=\"-\""}) == 2;
  })) << proxy_.metrics();
}

// RFC 1928: greeting, CONNECT to an IPv4 address, reply, bytes.
std::string socks5_connect(const base::SocketAddr& to) {
  std::string out = {5, 1, 0};
  out += std::string{5, 1, 0, 1};
  out.append(to.ip.bytes());
  out += static_cast<char>(to.port >> 8);
  out += static_cast<char>(to.port & 0xff);
  return out;
}

TEST_F(DirectTest, Socks5ConnectsOverHboneAndRefusesWithTheMatchingReply) {
  publish();
  start_pods();
  const auto socks = proxy_.listener(proxy_.ip(kClient), 15080);
  {
    auto fd = connect_from(proxy_.sockets(), proxy_.ip(kClient), socks, std::nullopt);
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(send_all(fd.get(), socks5_connect(app()) + "through socks"));
    Exchange r;
    read_into(fd.get(), r, 2 + 10 + 13);
    ASSERT_GE(r.received.size(), 12u) << "no socks5 replies";
    EXPECT_EQ(r.received.substr(0, 2), std::string("\x05\x00", 2)) << "method: no authentication";
    EXPECT_EQ(r.received[3], 0x00) << "reply: succeeded";
    EXPECT_EQ(r.received.substr(12), "through socks");
  }
  {
    // A service without endpoints: "host unreachable".
    auto fd = connect_from(proxy_.sockets(), proxy_.ip(kClient), socks, std::nullopt);
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(send_all(fd.get(), socks5_connect({proxy_.ip(kEmptyVip), 80})));
    Exchange r;
    read_into(fd.get(), r, 12);
    ASSERT_GE(r.received.size(), 12u);
    EXPECT_EQ(r.received[3], 0x04);
  }
  {
    // A domain name: "address type not supported" (no DNS yet), answered before any routing.
    auto fd = connect_from(proxy_.sockets(), proxy_.ip(kClient), socks, std::nullopt);
    ASSERT_TRUE(fd.valid());
    const std::string request = std::string{5, 1, 0} + std::string{5, 1, 0, 3, 7} + "example" + std::string{0, 80};
    ASSERT_TRUE(send_all(fd.get(), request));
    Exchange r;
    read_into(fd.get(), r, 12);
    ASSERT_GE(r.received.size(), 12u);
    EXPECT_EQ(r.received[3], 0x08);
  }
}

TEST_F(DirectTest, MtlsRequiredDeniesInboundPlaintextButNotHbone) {
  state::Match no_principal;
  no_principal.not_principals = {state::StringMatch{state::StringMatch::Kind::kPresence, ""}};
  publish({deny("require-mtls", no_principal)});
  start_pods();
  // Straight to the server pod's 15006, as a redirected plaintext connection would arrive.
  Exchange plain = round_trip(proxy_.sockets(), proxy_.ip(kOutside), proxy_.listener(proxy_.ip(kServer), 15006), app(),
                              "plaintext");
  EXPECT_TRUE(plain.received.empty());
  EXPECT_EQ(app_->accepted(), 0) << "a denied connection must never reach the app";
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_closed_total", {"reporter=\"destination\"", "response_flags=\"DENY\""}) == 1;
  })) << proxy_.metrics();
  EXPECT_EQ(via_outbound(app(), "over hbone").received, "over hbone");
}

TEST_F(DirectTest, APolicyChangeClosesTheLiveConnectionsItNowDenies) {
  publish();
  start_pods();
  auto fd = held_connection("first");
  ASSERT_TRUE(fd.valid());

  state::Match port;
  port.destination_ports = {app().port};
  auto denied = publish({deny("deny-app-port", port)});
  proxy_.on_worker(1, [&](PodWorker& server) { server.recheck_policies(*denied); });
  Exchange after;
  read_into(fd.get(), after, SIZE_MAX, 5s);
  EXPECT_TRUE(after.reset || after.eof) << "the now denied connection stayed open";
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_closed_total", {"reporter=\"destination\"", "response_flags=\"DENY\""}) == 1;
  })) << proxy_.metrics();
  // New connections are refused too (401 from the destination: policy_denied at the source).
  Exchange refused = via_outbound(app(), "again");
  EXPECT_TRUE(refused.received.empty());
  EXPECT_TRUE(eventually([&] {
    return metric("istio_tcp_connections_failed_total", {"reporter=\"source\"", "response_flags=\"DENY\""}) == 1;
  })) << proxy_.metrics();
}

TEST_F(DirectTest, AbortAllResetsThePodsOpenConnectionsAndTheirTasksEnd) {
  publish();
  start_pods();
  auto fd = held_connection("held");
  ASSERT_TRUE(fd.valid());
  std::size_t open_before = 0;
  proxy_.on_worker(0, [&](PodWorker& client) { open_before = client.active(); });
  EXPECT_EQ(open_before, 1u);

  proxy_.on_worker(0, [](PodWorker& client) { client.abort_all(); });
  Exchange after;
  read_into(fd.get(), after, SIZE_MAX, 5s);
  EXPECT_TRUE(after.reset) << "DelWorkload semantics: the app sees its connection reset";
  std::size_t open_after = 1;
  EXPECT_TRUE(eventually([&] {
    proxy_.on_worker(0, [&](PodWorker& client) { open_after = client.active(); });
    return open_after == 0;
  }));
}

}  // namespace
}  // namespace meshnode::proxy::testing
