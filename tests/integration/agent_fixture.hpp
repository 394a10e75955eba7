#pragma once
// Shared by the agent integration suites: test netns, a fake ZDS proxy, a plugin-event client, and
// the fixture running an in-process Agent against them. Header-only, file-local to each suite.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "agent/exec.hpp"
#include "integration/process.hpp"
#include "integration/test_util.hpp"
#include "base/unique_fd.hpp"
#include "nodeapi/zds.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string random_hex6() {
  std::random_device rd;
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06x", rd() & 0xffffff);
  return buf;
}

std::string sh(const std::vector<std::string>& argv) {
  auto out = run_program(argv);
  return out ? out->out + out->err : "exec failed: " + out.error().message();
}

// A netns named mn-<6hex>-agent-<suffix> with lo up, removed in the destructor.
class TestNetns {
 public:
  explicit TestNetns(const std::string& suffix) : name_("mn-" + random_hex6() + "-agent-" + suffix) {
    ok_ = run_checked({"ip", "netns", "add", name_}).has_value() &&
          run_checked({"ip", "-n", name_, "link", "set", "lo", "up"}).has_value();
  }
  ~TestNetns() { (void)run_program({"ip", "netns", "del", name_}); }
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] std::string path() const { return "/var/run/netns/" + name_; }
  [[nodiscard]] base::Netns open() const { return *base::Netns::open(path()); }
  [[nodiscard]] std::string nft(bool handles = false) const {
    if (handles) return sh({"ip", "netns", "exec", name_, "nft", "-a", "list", "ruleset"});
    return sh({"ip", "netns", "exec", name_, "nft", "list", "ruleset"});
  }
  [[nodiscard]] std::string ip_rules() const { return sh({"ip", "-n", name_, "rule", "show"}); }
  // Gives the netns the address a pod's primary CNI would (on lo is enough for the agent's check).
  [[nodiscard]] bool add_ip(const std::string& cidr) const {
    return run_checked({"ip", "-n", name_, "addr", "add", cidr, "dev", "lo"}).has_value();
  }
  [[nodiscard]] std::string iptables_save() const {
    return sh({"ip", "netns", "exec", name_, "iptables-save"}) + sh({"ip", "netns", "exec", name_, "ip6tables-save"});
  }

 private:
  std::string name_;
  bool ok_ = false;
};

// Root check shared by every test: skip when unprivileged, fail when CI=true.
class AgentIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() == 0) return;
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string_view(ci) == "true") FAIL() << "agent integration tests need root (CI=true)";
    GTEST_SKIP() << "agent integration tests need root";
  }
};


// ---- agent: plugin events and a ZDS client --------------------------------------------------------

// A minimal meshnode-proxy stand-in speaking the proxy side of ZDS: connects, says hello, acks every
// request (optionally holding each Add's ack until `release_ack`), and records what it received.
class FakeProxy {
 public:
  struct Received {
    std::string kind;  // "add", "keep", "del", "snapshot_sent"
    std::string uid;
    ino_t netns_ino = 0;
  };

  explicit FakeProxy(std::string path, bool hold_add_acks = false) : hold_(hold_add_acks) {
    for (auto deadline = Clock::now() + 5s; Clock::now() < deadline;) {
      auto fd = nodeapi::connect_seqpacket(path);
      if (fd) {
        fd_ = std::move(*fd);
        break;
      }
      std::this_thread::sleep_for(10ms);  // the agent's listener is not up yet: poll for it
    }
    if (!fd_ || !nodeapi::send_hello(fd_.get())) return;
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeProxy() { close(); }

  [[nodiscard]] bool connected() const { return fd_.valid(); }

  // Waits until `count` messages arrived; returns a copy of them.
  std::vector<Received> wait_for(std::size_t count, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return received_.size() >= count; });
    return received_;
  }
  void release_ack() {
    std::lock_guard lock(mutex_);
    ++released_;
    cv_.notify_all();
  }
  void close() {
    if (!thread_.joinable()) return;
    ::shutdown(fd_.get(), SHUT_RDWR);
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
      cv_.notify_all();
    }
    thread_.join();
    fd_.reset();
  }

 private:
  void loop() {
    std::size_t adds = 0;
    while (true) {
      auto request = nodeapi::recv_request(fd_.get());
      if (!request) return;
      Received r;
      const auto& m = request->message;
      if (m.has_add()) r = {"add", m.add().uid(), 0};
      if (m.has_keep()) r = {"keep", m.keep().uid(), 0};
      if (m.has_del()) r = {"del", m.del().uid(), 0};
      if (m.has_snapshot_sent()) r = {"snapshot_sent", "", 0};
      struct stat st {};
      if (request->netns && ::fstat(request->netns.get(), &st) == 0) r.netns_ino = st.st_ino;
      std::unique_lock lock(mutex_);
      received_.push_back(r);
      cv_.notify_all();
      if (r.kind == "add" && hold_) {
        ++adds;
        cv_.wait(lock, [&] { return released_ >= adds || closing_; });
      }
      lock.unlock();
      if (!nodeapi::send_ack(fd_.get(), "")) return;
    }
  }

  bool hold_;
  base::UniqueFd fd_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Received> received_;
  std::size_t released_ = 0;
  bool closing_ = false;
};

struct HttpResult {
  int status = 0;
  std::string body;
};

// One POST over the agent's Unix socket; the agent closes after each response.
class HttpCall {
 public:
  HttpCall(const std::string& socket_path, const std::string& path, const std::string& body) {
    fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    const std::string request = "POST " + path + " HTTP/1.1\r\nHost: unix\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)!::send(fd_.get(), request.data(), request.size(), MSG_NOSIGNAL);
  }
  // True when response bytes are already waiting (the agent answered).
  [[nodiscard]] bool answered() const {
    pollfd p{fd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  HttpResult result() {
    std::string raw;
    char buf[4096];
    pollfd p{fd_.get(), POLLIN, 0};
    while (::poll(&p, 1, 10000) > 0) {
      const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, static_cast<std::size_t>(n));
    }
    HttpResult r;
    if (raw.starts_with("HTTP/1.1 ")) r.status = std::stoi(raw.substr(9, 3));
    if (auto pos = raw.find("\r\n\r\n"); pos != std::string::npos) r.body = raw.substr(pos + 4);
    return r;
  }

 private:
  base::UniqueFd fd_;
};

HttpResult post(const std::string& socket, const std::string& path, const std::string& body) {
  return HttpCall(socket, path, body).result();
}

constexpr const char* kPodCidr = "10.9.0.7/32";  // the address add_body() names

class AgentEvents : public AgentIntegration {
 protected:
  void SetUp() override {
    AgentIntegration::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    dir_ = std::filesystem::temp_directory_path() / ("mn-" + random_hex6() + "-agent");
    std::filesystem::create_directories(dir_);
    options_.plugin_socket = (dir_ / "cni" / "pluginevent.sock").string();
    options_.zds_socket = (dir_ / "ztunnel.sock").string();
    options_.run_dir = (dir_ / "run").string();
    options_.policy.enroll_namespaces = {"shop"};
    options_.ack_timeout = 3s;
  }
  void TearDown() override {
    agent_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void start_agent() {
    agent_.reset();
    auto agent = Agent::start(options_, metrics_);
    ASSERT_TRUE(agent) << agent.error().message();
    agent_ = std::move(*agent);
  }
  std::string add_body(const TestNetns& pod, const std::string& ns = "shop") const {
    return R"({"Netns":")" + pod.path() + R"(","PodName":"web-1","PodNamespace":")" + ns +
           R"(","PodUID":"uid-)" + pod.name() +
           R"(","IPs":[{"Interface":0,"Address":{"IP":"10.9.0.7","Mask":"////AA=="},"Gateway":"10.9.0.1"}]})";
  }
  std::string uid(const TestNetns& pod) const { return "uid-" + pod.name(); }

  std::filesystem::path dir_;
  AgentOptions options_;
  telemetry::MetricsRegistry metrics_;
  std::unique_ptr<Agent> agent_;
};

#ifdef MESHNODE_PROXY_BIN
// Two simulated nodes (scripts/cluster.sh without its own nft rules), one pod each, one
// meshnode-proxy per node as a ZDS client of an in-process Agent per node.
class AgentWithProxy : public AgentEvents {
 protected:
  void SetUp() override {
    AgentEvents::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    prefix_ = "mn-" + random_hex6();
    auto up = run_program({"env", "MESHNODE_NO_REDIRECT=1", "bash", std::string(MESHNODE_SOURCE_DIR) + "/scripts/cluster.sh",
                           "up", "--prefix", prefix_, "--nodes", "2", "--pods", "1", "--workdir", dir_.string()},
                          {}, 90s);
    ASSERT_TRUE(up && up->exit_code == 0) << (up ? up->err : up.error().message());
    cluster_up_ = true;
    env_ = integration::parse_env(integration::read_file((dir_ / "cluster.env").string()));
    std::ofstream config(dir_ / "config.yaml");
    config << "workloads:\n";
    for (int n = 1; n <= 2; ++n) {
      config << "- uid: uid-n" << n << "\n  name: pod" << n << "\n  namespace: shop\n  serviceAccount: sa" << n
             << "\n  workloadIps: [\"" << pod_ip(n) << "\"]\n  protocol: HBONE\n  node: node" << n << "\n";
    }
    config << "services: []\npolicies: []\n";
  }
  void TearDown() override {
    proxies_.clear();
    app_.reset();
    agents_.clear();
    if (cluster_up_) {
      (void)run_program({"bash", std::string(MESHNODE_SOURCE_DIR) + "/scripts/cluster.sh", "down", "--prefix", prefix_},
                        {}, 60s);
    }
    AgentEvents::TearDown();
  }
  std::string pod_netns(int n) { return env_["MN_POD_" + std::to_string(n) + "_0_NETNS"]; }
  std::string pod_ip(int n) { return env_["MN_POD_" + std::to_string(n) + "_0_IP"]; }
  std::string node_netns(int n) { return env_["MN_NODE" + std::to_string(n) + "_NETNS"]; }
  AgentOptions node_options(int n) {
    AgentOptions o = options_;
    o.plugin_socket = (dir_ / ("ev" + std::to_string(n) + ".sock")).string();
    o.zds_socket = (dir_ / ("zds" + std::to_string(n) + ".sock")).string();
    o.run_dir = (dir_ / ("run" + std::to_string(n))).string();
    return o;
  }
  void start_node_agent(int n) {
    agents_.erase(n);
    auto agent = Agent::start(node_options(n), registries_[n]);
    ASSERT_TRUE(agent) << agent.error().message();
    agents_[n] = std::move(*agent);
  }
  // The agent inside node n's netns, as meshnode-agent runs there: its threads are created from a
  // thread that entered the netns, so its host rules land in the node's netns.
  void start_node_agent_in_node(int n, AgentOptions o) {
    agents_.erase(n);
    auto node = base::Netns::open("/var/run/netns/" + node_netns(n));
    ASSERT_TRUE(node) << node.error().message();
    base::Result<std::unique_ptr<Agent>> agent = std::unexpected(base::Error{});
    std::thread([&] { (void)node->run_in([&] { agent = Agent::start(o, registries_[n]); }); }).join();
    ASSERT_TRUE(agent) << agent.error().message();
    agents_[n] = std::move(*agent);
  }
  void start_proxy(int n) {
    const std::string label = (dir_ / ("proxy" + std::to_string(n))).string();
    proxies_[n] = integration::Process::spawn(
        {"ip", "netns", "exec", node_netns(n), MESHNODE_PROXY_BIN, "--config", (dir_ / "config.yaml").string(),
         "--ca-dir", (dir_ / "ca").string(), "--inpod-uds", node_options(n).zds_socket, "--log-level", "info"},
        {.stdout_path = label + ".out", .stderr_path = label + ".log"});
  }
  std::string add_event(int n) {
    return R"({"Netns":"/var/run/netns/)" + pod_netns(n) + R"(","PodName":"pod)" + std::to_string(n) +
           R"(","PodNamespace":"shop","PodUID":"uid-n)" + std::to_string(n) + R"(","PodServiceAccount":"sa)" +
           std::to_string(n) + R"(","IPs":[{"Interface":0,"Address":{"IP":")" + pod_ip(n) +
           R"(","Mask":"////AA=="},"Gateway":null}]})";
  }
  // The app in pod 2: answers every connection with the peer address it sees, then closes.
  bool start_app() {
    app_ = integration::Process::spawn(
        {"ip", "netns", "exec", pod_netns(2), "python3", "-c",
         "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
         "s.bind(('0.0.0.0',8080))\ns.listen()\nprint('ready',flush=True)\nwhile True:\n"
         " c,a=s.accept()\n c.sendall(('peer=%s\\n'%a[0]).encode())\n c.close()\n"},
        {.stdout_path = (dir_ / "app.out").string(), .stderr_path = (dir_ / "app.err").string()});
    return app_->wait_for_line("ready", 10s);
  }
  std::string listeners(int n) { return sh({"ip", "netns", "exec", pod_netns(n), "ss", "-ltnH"}); }
  // One connection from pod 1 to the app in pod 2; the app answers with the peer address it sees.
  std::string call_app() {
    auto out = run_program({"ip", "netns", "exec", pod_netns(1), "socat", "-T3", "-", "TCP:" + pod_ip(2) + ":8080"},
                           {}, 10s);
    return out ? out->out : "";
  }
  std::string proxy_metrics(int n) {
    return sh({"ip", "netns", "exec", node_netns(n), "curl", "-s", "http://127.0.0.1:15020/metrics"});
  }

  std::string prefix_;
  bool cluster_up_ = false;
  std::map<std::string, std::string> env_;
  std::map<int, telemetry::MetricsRegistry> registries_;
  std::map<int, std::unique_ptr<Agent>> agents_;
  std::map<int, integration::Process> proxies_;
  std::optional<integration::Process> app_;
};

#endif  // MESHNODE_PROXY_BIN

}  // namespace
}  // namespace meshnode::agent
