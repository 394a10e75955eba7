// Abuse suite on the simulated two-node cluster (issue 11): TLS abuse on 15008 (2,000 stalled
// handshakes, TLS 1.2 only, no ALPN, foreign trust domain, expired, two URI SANs, #fragment),
// the malicious-call matrix from inside an enrolled pod (the proxy's own ports on 127.0.0.1 and
// the pod IP, admin/metrics/readiness), the small-window app behind the in-pod hop (defect 6) and
// the open-files limit (defect 9). Every probe asserts the proxy stays up and a parallel
// legitimate tunnel keeps working, and prints the proxy's peak RSS during the probe.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <csignal>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/cluster_fixture.hpp"
#include "integration/test_util.hpp"

namespace meshnode::integration {
namespace {

constexpr int kHashPort = 9000;
constexpr int kSmallWindowPort = 9100;

/// Open fds of `pid`.
long fd_count(pid_t pid) {
  std::error_code ec;
  long n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

/// Samples a process's RSS every 50 ms from construction to destruction; peak() is the maximum.
class RssSampler {
 public:
  explicit RssSampler(pid_t pid) : pid_(pid), start_(rss_kib(pid)), peak_(start_) {
    thread_ = std::thread([this] {
      while (!stop_) {
        long now = rss_kib(pid_);
        if (now > peak_) peak_ = now;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  ~RssSampler() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  [[nodiscard]] long start() const { return start_; }
  [[nodiscard]] long peak() const { return peak_; }

 private:
  pid_t pid_;
  long start_;
  std::atomic<long> peak_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string json_field(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return "";
  at += key.size() + 4;
  auto end = json.find_first_of(",}", at);
  std::string v = json.substr(at, end - at);
  if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() - 2);
  return v;
}
long json_long(const std::string& json, const std::string& key) {
  auto v = json_field(json, key);
  return v.empty() ? -1 : std::stol(v);
}

class AbuseTest : public ClusterTest {
 public:
  // The proxies inherit a 1024 soft open-files limit (the usual default) so the limit test
  // below fails unless the proxy raises it itself.
  static void SetUpTestSuite() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_max > 1024) {
      limit.rlim_cur = 1024;
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    start_cluster({});
  }

 protected:
  /// A client leaf signed by `ca_dir`'s root with subjectAltName `san` ("URI:a,URI:b"), valid for
  /// `days` (-1: already expired).
  std::string make_leaf(const std::string& name, const std::string& san, int days = 1,
                        const std::string& ca_dir = "") {
    const std::string ca = ca_dir.empty() ? cluster().ca_dir() : ca_dir;
    const std::string dir = cluster().workdir() + "/" + name;
    std::filesystem::create_directories(dir);
    {
      std::ofstream ext(dir + "/ext.cnf");
      std::string escaped;  // '#' starts a comment in an OpenSSL config file
      for (char c : san) escaped += c == '#' ? std::string("\\#") : std::string(1, c);
      ext << "subjectAltName=critical," << escaped << "\nbasicConstraints=CA:FALSE\n"
          << "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth,serverAuth\n";
    }
    auto req = cluster().local({"openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                "-nodes", "-keyout", dir + "/key.pem", "-out", dir + "/leaf.csr", "-subj", "/O=cluster.local"});
    EXPECT_EQ(req.exit_code, 0) << req.describe();
    auto sign = cluster().local({"openssl", "x509", "-req", "-in", dir + "/leaf.csr", "-CA", ca + "/root-cert.pem",
                                 "-CAkey", ca + "/root-key.pem", "-CAcreateserial", "-CAserial", dir + "/ca.srl",
                                 "-days", std::to_string(days), "-extfile", dir + "/ext.cnf", "-out", dir + "/cert.pem"});
    EXPECT_EQ(sign.exit_code, 0) << sign.describe();
    return dir;
  }
  /// mn_abuse.py from node 1's netns (an off-mesh peer on the node network).
  RunResult abuse(std::vector<std::string> args, seconds timeout = seconds(60)) {
    std::vector<std::string> argv = {"python3", Cluster::tool("mn_abuse.py")};
    argv.insert(argv.end(), args.begin(), args.end());
    return cluster().in_node(1, argv, timeout);
  }
  /// mn_abuse.py from inside a pod's netns.
  RunResult abuse_in_pod(const std::string& pod, std::vector<std::string> args, seconds timeout = seconds(30)) {
    std::vector<std::string> argv = {"python3", Cluster::tool("mn_abuse.py")};
    argv.insert(argv.end(), args.begin(), args.end());
    return cluster().in_pod(pod, argv, timeout);
  }
  /// A 4 MiB each way tunnelled transfer client → server, in the background.
  Process legit_transfer(const std::string& label, const std::string& size = "4MiB") {
    if (!app_.running()) app_ = cluster().start_app("server", kHashPort, "hash");
    return cluster().start_in_pod("client",
                                  {"python3", Cluster::tool("mn_client.py"), "hash", "--host", cluster().pod("server").ip,
                                   "--port", std::to_string(kHashPort), "--up", size, "--down", size, "--timeout", "120"},
                                  label);
  }
  static void expect_ok(Process& transfer) {
    const auto code = transfer.wait_for(seconds(120));
    ASSERT_TRUE(code.has_value()) << "the legitimate tunnel did not finish";
    EXPECT_EQ(*code, 0) << transfer.stdout_text() << transfer.stderr_text();
    EXPECT_NE(transfer.stdout_text().find("\"failed\": 0,"), std::string::npos) << transfer.stdout_text();
  }
  void expect_proxies_up() {
    EXPECT_EQ(::kill(cluster().proxy_pid(1), 0), 0) << "node 1's proxy died";
    EXPECT_EQ(::kill(cluster().proxy_pid(2), 0), 0) << "node 2's proxy died";
  }
  static void report(const std::string& probe, const RssSampler& rss) {
    std::printf("[abuse] probe=%s rss_start_kib=%ld rss_peak_kib=%ld\n", probe.c_str(), rss.start(), rss.peak());
    std::fflush(stdout);
  }
  double metric(int node, const std::string& name, const std::vector<std::string>& labels) {
    return metric_sum(cluster().metrics(node), name, labels);
  }
  Process app_;
};

TEST_F(AbuseTest, TwoThousandStalledHandshakesAreBoundedAndEndAtTheDeadline) {
  const pid_t proxy = cluster().proxy_pid(2);
  RssSampler rss(proxy);
  Process transfer = legit_transfer("legit-during-stall", "20MiB");
  const auto flood = abuse({"stall", "--host", cluster().pod("server").ip, "--port", "15008", "--count", "2000",
                            "--hold", "15", "--hello"},
                           seconds(60));
  rss.stop();
  report("stalled_handshakes_2000", rss);
  std::printf("[abuse] stall: %s", flood.out.c_str());
  ASSERT_EQ(flood.exit_code, 0) << flood.describe();
  EXPECT_EQ(json_long(flood.out, "connected"), 2000) << flood.out;
  // One source: all but the per-source bound (16 per worker) are closed at once...
  EXPECT_GE(json_long(flood.out, "closed_within_2s"), 2000 - 2 * 16) << flood.out;
  // ...and the held ones at the 10 s handshake deadline, not later.
  EXPECT_EQ(json_long(flood.out, "still_open"), 0) << flood.out;
  EXPECT_LE(std::stod(json_field(flood.out, "max_closed_after")), 13.0) << flood.out;
#ifdef __SANITIZE_ADDRESS__
  // The proxy is an ASan build too: its quarantine and shadow keep freed blocks by design (155 MB
  // measured), so only a runaway is caught here; the 20 MB bound is the release build's.
  constexpr long kMaxGrowthKib = 512 * 1024;
#else
  constexpr long kMaxGrowthKib = 20 * 1024;
#endif
  EXPECT_LT(rss.peak() - rss.start(), kMaxGrowthKib) << "stalled handshakes held too much memory";
  expect_ok(transfer);
  EXPECT_GE(metric(2, "meshnode_inbound_handshake_failures_total", {"reason=\"source_limit\""}), 1900);
  EXPECT_GE(metric(2, "meshnode_inbound_handshake_failures_total", {"reason=\"timeout\""}), 1);
  expect_proxies_up();
}

TEST_F(AbuseTest, ClientCertificatesThatAreNotMeshSvidsGetNoTunnel) {
  const std::string ok = "URI:spiffe://cluster.local/ns/default/sa/client";
  struct Probe {
    std::string name;
    std::vector<std::string> args;  // extra mn_abuse.py tls arguments
    bool accepted;
  };
  auto with = [](const std::string& dir) { return std::vector<std::string>{"--cert", dir + "/cert.pem", "--key", dir + "/key.pem"}; };
  std::vector<Probe> probes = {
      {"control_mesh_leaf", with(make_leaf("good", ok)), true},
      {"two_uri_sans", with(make_leaf("two-sans", ok + ",URI:spiffe://cluster.local/ns/kube-system/sa/admin")), false},
      {"fragment", with(make_leaf("fragment", "URI:spiffe://cluster.local/ns/default/sa/zcli#frag")), false},
      {"foreign_trust_domain", with(make_leaf("foreign-td", "URI:spiffe://evil.org/ns/default/sa/client")), false},
      {"expired", with(make_leaf("expired", ok, -1)), false},
      {"no_certificate", {}, false},
  };
  auto tls12 = with(make_leaf("tls12", ok));
  tls12.push_back("--tls12");
  probes.push_back({"tls12_only", tls12, false});
  auto no_alpn = with(make_leaf("no-alpn", ok));
  no_alpn.push_back("--no-alpn");
  probes.push_back({"no_alpn", no_alpn, false});

  const pid_t proxy = cluster().proxy_pid(2);
  Process transfer = legit_transfer("legit-during-certs");
  for (const auto& p : probes) {
    RssSampler rss(proxy);
    std::vector<std::string> args = {"tls", "--host", cluster().pod("server").ip, "--port", "15008"};
    args.insert(args.end(), p.args.begin(), p.args.end());
    const auto r = abuse(args, seconds(30));
    rss.stop();
    report(p.name, rss);
    std::printf("[abuse] %s: %s", p.name.c_str(), r.out.c_str());
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(json_field(r.out, "accepted"), p.accepted ? "true" : "false") << p.name << ": " << r.out;
  }
  expect_ok(transfer);
  const std::string m = cluster().metrics(2);
  for (const char* reason : {"svid", "trust_domain", "expired", "protocol", "alpn"}) {
    EXPECT_GE(metric_sum(m, "meshnode_inbound_handshake_failures_total", {"reason=\"" + std::string(reason) + "\""}), 1)
        << reason;
  }
  EXPECT_GE(metric_sum(m, "meshnode_inbound_handshake_failures_total", {"reason=\"svid\""}), 2);
  expect_proxies_up();
}

// From inside the enrolled client pod, every port the proxy uses, on 127.0.0.1, on the pod's own
// IP and on the node IP. What is right per port (asserted below, documented in the report):
//  - 15001/15006/15008 on 127.0.0.1 / the pod IP: served or refused, never a loop (the process
//    keeps its fd count, the probe ends within its 3 s read window or earlier), never a crash.
//  - 15000 (admin: /quitquitquit, /config_dump) is bound to the node's 127.0.0.1 only: a pod can
//    never reach it; a POST /quitquitquit from the pod must not stop the proxy.
//  - 15020 (metrics) and 15021 (readiness) on the node IP are read-only and may answer.
TEST_F(AbuseTest, MaliciousCallsFromAPodToTheProxysOwnPortsNeitherLoopNorCrash) {
  const pid_t proxy = cluster().proxy_pid(1);
  const long fds_before = fd_count(proxy);
  RssSampler rss(proxy);
  Process transfer = legit_transfer("legit-during-matrix");
  const std::string pod_ip = cluster().pod("client").ip;
  const std::string node_ip = cluster().node_ip(1);
  const std::string quit = "POST /quitquitquit HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 0\\r\\n\\r\\n";
  const std::string dump = "GET /config_dump HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n";
  int admin_answers = 0;
  for (const std::string& host : {std::string("127.0.0.1"), pod_ip, node_ip}) {
    for (int port : {15001, 15006, 15008, 15080, 15000, 15020, 15021}) {
      const bool http = port == 15000 || port == 15020 || port == 15021;
      const std::vector<std::string> sends = http ? std::vector<std::string>{quit, dump}
                                                  : std::vector<std::string>{"hello\\n"};
      for (const std::string& send : sends) {
        const auto r = abuse_in_pod("client", {"probe", "--host", host, "--port", std::to_string(port), "--send", send},
                                    seconds(20));
        std::printf("[matrix] %s:%d send=%.12s -> %s", host.c_str(), port, send.c_str(), r.out.c_str());
        EXPECT_EQ(r.exit_code, 0) << r.describe();
        EXPECT_FALSE(r.timed_out) << host << ":" << port << " hung";
        if (port == 15000 && json_field(r.out, "reply").rfind("HTTP/1.1 200", 0) == 0) ++admin_answers;
      }
    }
  }
  rss.stop();
  report("malicious_matrix", rss);
  EXPECT_EQ(admin_answers, 0) << "the admin server answered a pod";
  expect_ok(transfer);
  expect_proxies_up();
  // No loop: no connection piles up (fds back to where they were, give or take the pool).
  EXPECT_TRUE(eventually(seconds(20), [&] { return fd_count(proxy) <= fds_before + 16; }))
      << "fds before " << fds_before << ", now " << fd_count(proxy);
}

// Issue 11 defect 6: an app with SO_RCVBUF 4096 reading in 1 KiB pieces behind the proxy's in-pod
// hop (loopback, MSS 32741) received 3.2 MB in > 60 s, directly in < 1 s. Must: within 2× direct.
TEST_F(AbuseTest, SmallWindowAppBehindTheInPodHopIsAsFastAsDirect) {
  Process meshed = cluster().start_in_pod(
      "server", {"python3", Cluster::tool("mn_abuse.py"), "smallwin-serve", "--port", std::to_string(kSmallWindowPort)},
      "smallwin-server");
  Process direct = cluster().start_in_pod(
      "legacy", {"python3", Cluster::tool("mn_abuse.py"), "smallwin-serve", "--port", std::to_string(kSmallWindowPort)},
      "smallwin-legacy");
  ASSERT_TRUE(meshed.wait_for_line("\"ready\"", seconds(20)));
  ASSERT_TRUE(direct.wait_for_line("\"ready\"", seconds(20)));
  auto send = [&](const std::string& from_node_or_pod, const std::string& to) {
    std::vector<std::string> argv = {"python3", Cluster::tool("mn_abuse.py"), "smallwin-send", "--host",
                                     cluster().pod(to).ip, "--port", std::to_string(kSmallWindowPort),
                                     "--bytes", "3200000", "--timeout", "90"};
    return from_node_or_pod == "node" ? cluster().in_node(2, argv, seconds(100))
                                      : cluster().in_pod(from_node_or_pod, argv, seconds(100));
  };
  const auto d = send("node", "legacy");  // no proxy on the path
  const auto m = send("client", "server");  // outbound, HBONE, inbound, in-pod hop to the app
  std::printf("[smallwin] direct: %s[smallwin] meshed: %s", d.out.c_str(), m.out.c_str());
  ASSERT_EQ(d.exit_code, 0) << d.describe();
  ASSERT_EQ(m.exit_code, 0) << m.describe();
  EXPECT_EQ(json_long(m.out, "received"), 3200000);
  const double direct_s = std::stod(json_field(d.out, "seconds"));
  const double meshed_s = std::stod(json_field(m.out, "seconds"));
  // 0.5 s floor: a direct time near zero would make the ratio noise, and with a 4 KiB receive
  // window the kernel's zero-window probe (persist timer, 200 ms minimum) may fire once or twice
  // on the in-pod hop: the same code took 0.07, 0.33 or 0.51-0.53 s under ASan on one host
  // (session 34). The defect this guards against took over 60 s.
  EXPECT_LE(meshed_s, 2 * std::max(direct_s, 0.5)) << "direct " << direct_s << " s, meshed " << meshed_s << " s";
}

TEST_F(AbuseTest, ProxyRaisesItsOpenFilesSoftLimitToTheHardLimitAndLogsIt) {
  std::ifstream in("/proc/" + std::to_string(cluster().proxy_pid(1)) + "/limits");
  std::string line;
  std::string soft, hard;
  while (std::getline(in, line)) {
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream fields(line.substr(14));
      fields >> soft >> hard;
    }
  }
  EXPECT_FALSE(soft.empty());
  EXPECT_EQ(soft, hard);
  EXPECT_NE(cluster().proxy_log(1).find("open-files limit " + hard), std::string::npos) << tail_lines(cluster().proxy_log(1), 20);
}

}  // namespace
}  // namespace meshnode::integration
