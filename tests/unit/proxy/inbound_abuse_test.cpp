// Inbound HBONE (15008) and plaintext (15006) under abuse, without root (issue 11 defects 7, 9):
// stalled handshakes are bounded per source and per listener and end at the handshake deadline;
// client certificates that are not X.509-SVIDs of our trust domain (two URI SANs, a #fragment, a
// foreign trust domain, expired), TLS 1.2 and no ALPN are refused with a counted reason; a
// plaintext connection without an original destination ends with one outcome. Before the fixes
// the two-SAN and #fragment clients got a tunnel, stalled handshakes were unbounded and the
// plaintext connection vanished without a log line or a metric.
#include <openssl/ssl.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tls/context.hpp"
#include "unit/proxy/direct_harness.hpp"

namespace meshnode::proxy::testing {
namespace {

constexpr std::uint8_t kClient = 1;
constexpr std::uint8_t kServer = 2;
constexpr std::uint8_t kAttacker = 9;

state::Workload workload(std::string name, const base::IpAddr& ip) {
  state::Workload w;
  w.uid = "cluster1//v1/Pod/default/" + name;
  w.name = name;
  w.ns = "default";
  w.service_account = std::move(name);
  w.addresses = {ip};
  w.protocol = state::TunnelProtocol::kHbone;
  return w;
}

/// A plain TCP connection from `from` to `to` that sends nothing (a stalled TLS handshake).
base::UniqueFd stalled(fakes::DirectSockets& sockets, const base::IpAddr& from, const base::SocketAddr& to) {
  return connect_from(sockets, from, to, std::nullopt);
}

/// True when the proxy closed `fd` (EOF or reset) within `limit`.
bool closed_within(int fd, Clock::duration limit) {
  Exchange r;
  read_into(fd, r, SIZE_MAX, limit);
  return r.eof || r.reset;
}

class InboundAbuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    app_ = std::make_unique<EchoServer>(base::SocketAddr{proxy_.ip(kServer), 0});
    auto snapshot = state::StateSnapshot::build(
        {workload("client", proxy_.ip(kClient)), workload("server", proxy_.ip(kServer))}, {}, {});
    ASSERT_TRUE(snapshot) << snapshot.error().message();
    proxy_.publish(*snapshot);
  }
  void start_pods() {
    proxy_.start_pod(workload("client", proxy_.ip(kClient)), proxy_.ip(kClient));
    proxy_.start_pod(workload("server", proxy_.ip(kServer)), proxy_.ip(kServer));
  }
  [[nodiscard]] base::SocketAddr hbone() const { return proxy_.listener(proxy_.ip(kServer), 15008); }
  /// A legitimate tunnel: client pod → outbound → HBONE → server app, echoing `bytes`.
  bool legit_tunnel_works(const std::string& bytes = "legit") {
    Exchange r = round_trip(proxy_.sockets(), proxy_.ip(kClient), proxy_.listener(proxy_.ip(kClient), 15001),
                            app_->address(), bytes);
    return r.received == bytes && r.eof;
  }
  double failures(std::string_view reason) {
    return metric_sum(proxy_.metrics(), "meshnode_inbound_handshake_failures_total",
                      {"reason=\"" + std::string(reason) + "\""});
  }

  /// Handshakes with `ctx` from the attacker's address and reads once: true when the server
  /// accepted (its HTTP/2 SETTINGS arrive), false when it refused (alert or close).
  bool server_accepts(SSL_CTX* ctx) {
    auto fd = connect_from(proxy_.sockets(), proxy_.ip(kAttacker), hbone(), std::nullopt);
    if (!fd) return false;
    timeval tv{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    tls::SslPtr ssl(SSL_new(ctx));
    SSL_set_fd(ssl.get(), fd.get());
    if (SSL_connect(ssl.get()) != 1) return false;
    char buf[64];
    return SSL_read(ssl.get(), buf, sizeof buf) > 0;
  }
  /// A client context whose leaf has exactly `sans`, valid over [now + from, now + to].
  tls::SslCtxPtr client_context(const std::vector<std::string>& sans, std::chrono::hours from = -1h,
                                std::chrono::hours to = 1h) {
    auto ca = tls::LocalCa::load_or_create(proxy_.ca_dir());  // same root as the proxy's CA
    EXPECT_TRUE(ca) << ca.error().message();
    const auto now = std::chrono::system_clock::now();
    auto ck = (*ca)->issue_for_test(sans, {}, now + from, now + to);
    EXPECT_TRUE(ck) << ck.error().message();
    auto ctx = tls::make_client_context(*ck);
    EXPECT_TRUE(ctx) << ctx.error().message();
    return std::move(*ctx);
  }

  DirectProxy proxy_;
  std::unique_ptr<EchoServer> app_;
};

TEST_F(InboundAbuseTest, StalledHandshakesAreBoundedPerSourceAndListenerAndEndAtTheDeadline) {
  proxy_.options().handshake_timeout = 2s;
  proxy_.options().max_handshakes_per_source = 4;
  proxy_.options().max_handshakes_per_listener = 8;
  proxy_.options().handshake_evict_after = 1h;  // bounds and the deadline only (eviction: below)
  start_pods();
  std::vector<base::UniqueFd> held;
  for (int i = 0; i < 10; ++i) held.push_back(stalled(proxy_.sockets(), proxy_.ip(kAttacker), hbone()));
  // The four first are held; the six others are closed at once, before any TLS state exists.
  ASSERT_TRUE(eventually([&] { return failures("source_limit") == 6; })) << proxy_.metrics();
  int closed_now = 0;
  for (auto& fd : held) closed_now += closed_within(fd.get(), 200ms) ? 1 : 0;
  EXPECT_EQ(closed_now, 6);
  // Other sources are not affected by one source's stalled handshakes.
  EXPECT_TRUE(legit_tunnel_works());

  const auto filled = Clock::now();
  for (std::uint8_t host : {10, 11, 12, 13}) held.push_back(stalled(proxy_.sockets(), proxy_.ip(host), hbone()));
  auto one_too_many = stalled(proxy_.sockets(), proxy_.ip(14), hbone());
  EXPECT_TRUE(eventually([&] { return failures("listener_limit") == 1; })) << proxy_.metrics();
  EXPECT_TRUE(closed_within(one_too_many.get(), 1s));

  // The deadline is enforced: all eight held handshakes end at ≈ 2 s, counted as timeouts.
  ASSERT_TRUE(eventually([&] { return failures("timeout") == 8; }, 10s)) << proxy_.metrics();
  EXPECT_GE(Clock::now() - filled, 1500ms) << "held handshakes ended before the deadline";
  EXPECT_TRUE(legit_tunnel_works("after the flood"));
}

// Two source IPs stalling handshakes fill the listener (4 + 4 of 8 slots) and would hold it until
// the 10 s deadline; once the oldest has stalled for 300 ms, a legitimate peer takes its slot.
TEST_F(InboundAbuseTest, AFewSourcesStallingHandshakesCannotLockALegitimatePeerOut) {
  proxy_.options().handshake_timeout = 10s;
  proxy_.options().max_handshakes_per_source = 4;
  proxy_.options().max_handshakes_per_listener = 8;
  proxy_.options().handshake_evict_after = 300ms;
  start_pods();
  std::vector<base::UniqueFd> held;
  const auto attack = Clock::now();
  for (std::uint8_t host : {10, 11}) {
    for (int i = 0; i < 4; ++i) held.push_back(stalled(proxy_.sockets(), proxy_.ip(host), hbone()));
  }
  // Eviction is by age: nothing but time says the stalled handshakes are old enough.
  std::this_thread::sleep_until(attack + 400ms);
  const auto legit = Clock::now();
  EXPECT_TRUE(legit_tunnel_works());
  EXPECT_LT(Clock::now() - legit, 2s);
  EXPECT_TRUE(eventually([&] { return failures("evicted") == 1; })) << proxy_.metrics();
  EXPECT_EQ(failures("listener_limit"), 0) << proxy_.metrics();
  // The evicted one is the oldest (the first connection); the seven others are still held.
  EXPECT_TRUE(closed_within(held.front().get(), 1s));
  int still_held = 0;
  for (std::size_t i = 1; i < held.size(); ++i) still_held += closed_within(held[i].get(), 50ms) ? 0 : 1;
  EXPECT_EQ(still_held, 7);
}

TEST_F(InboundAbuseTest, ClientCertificatesThatAreNotSvidsOfOurTrustDomainAreRefusedAndCounted) {
  start_pods();
  const std::string ok = "spiffe://cluster.local/ns/default/sa/client";
  auto good = client_context({ok});
  EXPECT_TRUE(server_accepts(good.get())) << "the control case must be accepted";

  auto two_sans = client_context({ok, "spiffe://cluster.local/ns/kube-system/sa/admin"});
  EXPECT_FALSE(server_accepts(two_sans.get()));
  auto fragment = client_context({"spiffe://cluster.local/ns/default/sa/zcli#frag"});
  EXPECT_FALSE(server_accepts(fragment.get()));
  auto foreign = client_context({"spiffe://evil.org/ns/default/sa/client"});
  EXPECT_FALSE(server_accepts(foreign.get()));
  auto expired = client_context({ok}, -48h, -24h);
  EXPECT_FALSE(server_accepts(expired.get()));

  auto tls12 = client_context({ok});
  SSL_CTX_set_min_proto_version(tls12.get(), TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(tls12.get(), TLS1_2_VERSION);
  EXPECT_FALSE(server_accepts(tls12.get()));
  auto no_alpn = client_context({ok});
  SSL_CTX_set_alpn_protos(no_alpn.get(), nullptr, 0);
  EXPECT_FALSE(server_accepts(no_alpn.get()));

  EXPECT_TRUE(eventually([&] {
    return failures("svid") == 2 && failures("trust_domain") == 1 && failures("expired") == 1 &&
           failures("protocol") == 1 && failures("alpn") == 1;
  })) << proxy_.metrics();
  EXPECT_TRUE(legit_tunnel_works());
}

TEST_F(InboundAbuseTest, PlaintextWithoutOriginalDestinationEndsWithOneCountedOutcome) {
  start_pods();
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len = net::to_sockaddr(base::SocketAddr{proxy_.ip(kAttacker), 0}, ss);
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  proxy_.sockets().no_original_dst(net::local_addr(fd.get()).value());
  len = net::to_sockaddr(proxy_.listener(proxy_.ip(kServer), 15006), ss);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  EXPECT_TRUE(closed_within(fd.get(), 5s));
  EXPECT_TRUE(eventually([&] {
    return metric_sum(proxy_.metrics(), "istio_tcp_connections_failed_total", {"reporter=\"destination\""}) == 1 &&
           metric_sum(proxy_.metrics(), "istio_tcp_connections_opened_total", {"reporter=\"destination\""}) == 1;
  })) << proxy_.metrics();
}

}  // namespace
}  // namespace meshnode::proxy::testing
