// HTTP/2 abuse suite (issue 11 "Abuse suite"): node 2's proxy, serving the server pod's :15008, is
// attacked from node 1's netns by a peer holding a certificate from the mesh root
// (tools/h2_abuse.py, raw frames). For every probe: the proxy stays up, a legitimate tunnel
// (client pod -> server pod, 1 MiB each way) opened while the probe runs succeeds in bounded time,
// and the proxy's resident memory stays bounded; the peak RSS of each probe is printed.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/cluster_fixture.hpp"
#include "integration/test_util.hpp"

namespace meshnode::integration {
namespace {

constexpr int kHashPort = 9000;

/// Samples a process's RSS every 10 ms on its own thread; peak() is the highest seen.
class RssSampler {
 public:
  explicit RssSampler(pid_t pid) : pid_(pid), thread_([this] {
    while (!stop_) {
      peak_ = std::max(peak_.load(), rss_kib(pid_));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }) {}
  ~RssSampler() {
    stop_ = true;
    thread_.join();
  }
  long peak() const { return std::max(peak_.load(), rss_kib(pid_)); }

 private:
  pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<long> peak_{0};
  std::thread thread_;
};

class H2AbuseTest : public ClusterTest {
 protected:
  /// A client certificate with the client's SPIFFE ID, issued by the mesh root in one openssl
  /// step (openssl 3 `req -x509 -CA`); minted once per test.
  std::string attacker_cert() {
    const std::string dir = cluster().workdir() + "/attacker";
    if (std::filesystem::exists(dir + "/cert.pem")) return dir;
    std::filesystem::create_directories(dir);
    const std::string ca = cluster().ca_dir();
    auto r = cluster().local({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                              "-nodes", "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem", "-days", "1",
                              "-subj", "/O=cluster.local", "-CA", ca + "/root-cert.pem", "-CAkey", ca + "/root-key.pem",
                              "-addext", "subjectAltName=URI:spiffe://cluster.local/ns/default/sa/client",
                              "-addext", "basicConstraints=CA:FALSE", "-addext", "extendedKeyUsage=clientAuth"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return dir;
  }

  /// One probe against node 2 with a legitimate 1 MiB tunnel alongside; records the peak RSS.
  /// Returns the attacker's JSON line. `extra` is appended to the tool's arguments.
  std::string run_probe(const std::string& probe, bool read = true, const std::vector<std::string>& extra = {},
                        long max_growth_kib = 30 * 1024) {
    SCOPED_TRACE(probe);
    if (::testing::Test::HasFatalFailure()) return {};
    if (!app_.running()) app_ = cluster().start_app("server", kHashPort, "hash");
    const pid_t proxy = cluster().proxy_pid(2);
    EXPECT_GT(proxy, 0);
    if (proxy <= 0) return {};
    const std::string cert = attacker_cert();
    const std::string server = cluster().pod("server").ip;
    const long before = rss_kib(proxy);
    RssSampler sampler(proxy);
    std::vector<std::string> argv = {"python3", Cluster::tool("h2_abuse.py"), probe, "--host", server, "--authority",
                                     server + ":" + std::to_string(kHashPort), "--cert", cert + "/cert.pem", "--key",
                                     cert + "/key.pem", "--read-seconds", "2"};
    if (!read) argv.push_back("--no-read");
    argv.insert(argv.end(), extra.begin(), extra.end());
    RunResult attack;
    std::thread attacker([&] { attack = cluster().in_node(1, argv, seconds(20)); });
    const auto start = std::chrono::steady_clock::now();
    const auto legit = cluster().in_pod("client",
                                        {"python3", Cluster::tool("mn_client.py"), "hash", "--host", server, "--port",
                                         std::to_string(kHashPort), "--up", "1MiB", "--down", "1MiB", "--timeout", "10"},
                                        seconds(20));
    const auto legit_time = std::chrono::steady_clock::now() - start;
    attacker.join();
    const long peak = sampler.peak();
    std::printf("abuse\tprobe=%s%s\trss_before_kib=%ld\tpeak_rss_kib=%ld\tlegit_ms=%lld\tattacker=%s", probe.c_str(),
                read ? "" : "_noread", before, peak,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(legit_time).count()),
                attack.out.c_str());
    EXPECT_EQ(attack.exit_code, 0) << attack.describe();
    EXPECT_EQ(legit.exit_code, 0) << "the legitimate tunnel failed during the probe: " << legit.describe();
    EXPECT_NE(legit.out.find("\"failed\": 0,"), std::string::npos) << legit.describe();
    EXPECT_LT(legit_time, seconds(5)) << "the legitimate tunnel was stalled by the probe";
    EXPECT_EQ(kill(proxy, 0), 0) << "the proxy died";
    EXPECT_FALSE(cluster().metrics(2).empty()) << "the proxy stopped answering its metrics port";
    EXPECT_LT(peak, before + max_growth_kib) << "the probe grew the proxy's RSS from " << before << " to " << peak << " KiB";
    return attack.out;
  }

  Process app_;
};

TEST_F(H2AbuseTest, ProxySurvivesEveryProbeWithBoundedMemory) {
#ifdef __SANITIZE_ADDRESS__
  // An ASan proxy keeps freed blocks in its quarantine, and since coroutine frames come from the
  // allocator (no Asio frame recycling) every frame of a 50,000-PING flood lands there: +31 MB
  // measured for ping_flood. The release build holds the real 30 MB bound.
  constexpr long kMaxGrowthKib = 64 * 1024;
#else
  constexpr long kMaxGrowthKib = 30 * 1024;
#endif
  for (const char* probe : {"rapid_reset", "continuation_flood", "hpack_bomb", "huge_headers", "settings_flood",
                            "ping_flood", "window_update_overflow", "zero_window", "even_stream_ids",
                            "reused_stream_ids", "data_on_closed", "scheme_path", "bad_authority", "non_connect"}) {
    run_probe(probe, /*read=*/true, {}, kMaxGrowthKib);
  }
  for (const char* probe : {"settings_flood", "ping_flood", "zero_window"}) {
    run_probe(probe, /*read=*/false, {}, kMaxGrowthKib);
  }
}

// Defect 3 at the scale: 5 connections x 100 streams, each asking the app for 8 MiB with a
// stream window of 0 that is never opened. The proxy must stop reading the app (back-pressure), send
// no DATA beyond the window, and stay within 30 MB of its idle RSS (before the fix: 45 -> 173 MB).
TEST_F(H2AbuseTest, FiveHundredZeroWindowDownloadsHoldLittleMemory) {
#ifdef __SANITIZE_ADDRESS__
  // An ASan proxy keeps freed blocks in its quarantine (+55 MB measured for this probe): only a
  // runaway is caught here (the window-blind limit grows a release proxy by 143 MB).
  constexpr long kMaxGrowthKib = 256 * 1024;
#else
  constexpr long kMaxGrowthKib = 30 * 1024;
#endif
  const std::string out = run_probe("zero_window_download", /*read=*/true, {"--connections", "5", "--read-seconds", "4"},
                                    kMaxGrowthKib);
  EXPECT_NE(out.find("\"headers\": 500,"), std::string::npos) << "every stream should have its 200: " << out;
  EXPECT_NE(out.find("\"data_bytes\": 0,"), std::string::npos) << "DATA sent beyond a window of 0: " << out;
}

}  // namespace
}  // namespace meshnode::integration
