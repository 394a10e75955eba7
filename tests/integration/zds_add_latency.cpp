// Measurement, not a test (DISABLED_: run by bench/zds_add_latency.sh): time from sending
// AddWorkload to receiving its Ack, over N pods (ZDS_LATENCY_PODS, default 100). Each pod is a
// bare netns (lo + one veth, one IPv4 address) whose uid is NOT in any config, so the proxy takes
// the identity from WorkloadInfo and the addresses from the pod's interfaces, and binds 15001,
// 15006 and 15008 in it on every worker. Prints median, p99 and max; asserts only that every Add
// succeeded.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "fakes/zds_server.hpp"
#include "integration/process.hpp"

namespace meshnode::integration {
namespace {

using std::chrono::steady_clock;

/// The pods' namespaces: <prefix>-node (the proxy runs here, holds the veth peers) and
/// <prefix>-z<i>. Removed (with anything running inside) in the destructor.
class BarePods {
 public:
  BarePods(const std::string& workdir, int n) : workdir_(workdir) {
    std::random_device rd;
    char buf[16];
    std::snprintf(buf, sizeof buf, "mn-%06x", std::uniform_int_distribution<int>(0, 0xffffff)(rd));
    prefix_ = buf;
    // One bash process creates them all (hundreds of `ip` calls).
    const std::string script =
        "set -e; p=" + prefix_ + "; ip netns add $p-node; ip -n $p-node link set lo up;"
        " for i in $(seq 0 " + std::to_string(n - 1) + "); do ns=$p-z$i; ip netns add $ns;"
        " ip -n $ns link set lo up; ip -n $ns link add eth0 type veth peer name z$i netns $p-node;"
        " ip -n $ns addr add 198.19.$((200 + i / 200)).$((10 + i % 200))/16 dev eth0; ip -n $ns link set eth0 up;"
        " ip -n $p-node link set z$i up; done";
    up_ = run({"bash", "-c", script}, seconds(300), workdir_);
  }
  ~BarePods() {
    run({"bash", "-c", "source " + std::string(MESHNODE_SOURCE_DIR) + "/scripts/lib/cluster.sh && cluster_down " + prefix_},
        seconds(120), workdir_);
  }
  [[nodiscard]] const RunResult& up() const { return up_; }
  [[nodiscard]] std::string netns(int i) const { return prefix_ + "-z" + std::to_string(i); }
  [[nodiscard]] std::string node() const { return prefix_ + "-node"; }

 private:
  std::string workdir_;
  std::string prefix_;
  RunResult up_;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(std::max(0.0, std::ceil(p * static_cast<double>(v.size())) - 1));
  return v[std::min(idx, v.size() - 1)];
}

TEST(ZdsMeasurement, DISABLED_AddWorkloadToAckLatency) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
  const int n = std::getenv("ZDS_LATENCY_PODS") ? std::atoi(std::getenv("ZDS_LATENCY_PODS")) : 100;
  char tmpl[] = "/tmp/meshnode-zdslat.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string workdir = tmpl;
  {
    const auto t0 = steady_clock::now();
    BarePods pods(workdir, n);
    ASSERT_EQ(pods.up().exit_code, 0) << pods.up().describe();
    std::printf("created %d pod netns in %.1f s\n", n, std::chrono::duration<double>(steady_clock::now() - t0).count());

    const std::string path = workdir + "/zds.sock";
    auto agent = fakes::ZdsServer::start(path);
    ASSERT_TRUE(agent) << agent.error().message();
    Process proxy = Process::spawn({"ip", "netns", "exec", pods.node(), MESHNODE_PROXY_BIN, "--ca-dir", workdir + "/ca",
                                    "--inpod-uds", path, "--log-level", "warn"},
                                   {.stdout_path = workdir + "/proxy.out", .stderr_path = workdir + "/proxy.log"});
    ASSERT_TRUE(agent->accept_client(fakes::in(seconds(30)))) << read_file(workdir + "/proxy.log");
    ASSERT_TRUE(agent->expect_hello(fakes::in(seconds(5))));

    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      base::UniqueFd fd(::open(("/var/run/netns/" + pods.netns(i)).c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_TRUE(fd.valid());
      nodeapi::zds::WorkloadInfo info;
      info.set_name("z" + std::to_string(i));
      info.set_namespace_("bench");
      info.set_service_account("sa" + std::to_string(i));
      const auto sent = steady_clock::now();
      ASSERT_TRUE(agent->add("bench//v1/Pod/bench/z" + std::to_string(i), info, fd.get()));
      auto ack = agent->read_ack(fakes::in(seconds(10)));
      const auto acked = steady_clock::now();
      ASSERT_TRUE(ack) << ack.error().message();
      ASSERT_EQ(*ack, "") << "pod " << i;
      ms.push_back(std::chrono::duration<double, std::milli>(acked - sent).count());
    }
    ASSERT_TRUE(agent->snapshot_sent());
    ASSERT_TRUE(agent->read_ack(fakes::in(seconds(10))));
    double sum = 0;
    for (double v : ms) sum += v;
    std::printf("AddWorkload -> Ack over %d pods (proxy: 2 workers, 3 listeners x 2 workers per pod):\n"
                "  median %.3f ms   p99 %.3f ms   max %.3f ms   mean %.3f ms   first %.3f ms\n",
                n, percentile(ms, 0.5), percentile(ms, 0.99), *std::max_element(ms.begin(), ms.end()),
                sum / static_cast<double>(n), ms.front());
    EXPECT_TRUE(proxy.running());
    proxy.terminate(seconds(10));
  }
  if (std::getenv("MESHNODE_KEEP_WORKDIR") == nullptr) std::filesystem::remove_all(workdir);
}

}  // namespace
}  // namespace meshnode::integration
