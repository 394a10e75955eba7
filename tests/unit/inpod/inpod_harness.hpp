#pragma once

// In-pod tests without root: the WorkloadManager (and the ZDS client over a real SOCK_SEQPACKET
// socket to a fake agent) with real listener sets on one worker thread (or as many as a test
// asks for), sockets from fakes::DirectSockets and stand-in pod netns handles. The control
// io_context runs on its own thread; everything that is control-thread only is reached through
// `on_control`.

#include <gtest/gtest.h>
#include <unistd.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fakes/direct_sockets.hpp"
#include "unit/support/eventually.hpp"
#include "inpod/workload_manager.hpp"
#include "net/drain_scope.hpp"
#include "proxy/tcp_metrics.hpp"
#include "state/store.hpp"
#include "telemetry/metrics.hpp"
#include "telemetry/readiness.hpp"
#include "tls/cert_manager.hpp"
#include "tls/local_ca.hpp"
#include "unit/tls/tls_test_util.hpp"

namespace meshnode::inpod::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing_support::eventually;

class InpodHarness {
 public:
  /// `workers` data worker threads, connections balanced across them (proxy::WorkerLoads).
  explicit InpodHarness(std::size_t workers = 1) : loads_(workers, &registry_) {
    certs_ = tls::testing::cert_manager_in(dir_);
    proxy::ProxyInputs inputs{store_, *certs_, tcp_metrics_, sockets_, tasks_, {}};
    inputs.loads = &loads_;
    std::vector<asio::io_context*> ios;
    for (std::size_t i = 0; i < workers; ++i) {
      workers_.push_back(std::make_unique<asio::io_context>(1));
      ios.push_back(workers_.back().get());
      worker_guards_.emplace_back(workers_.back()->get_executor());
    }
    manager_ = std::make_unique<WorkloadManager>(WorkloadManager::Deps{control_, ios, inputs, {false}, readiness_, registry_});
    for (auto& io : workers_) worker_threads_.emplace_back([io = io.get()] { io->run(); });
    control_thread_ = std::thread([this] { control_.run(); });
  }
  ~InpodHarness() {
    on_control([this] { manager_.reset(); });
    EXPECT_TRUE(eventually([&] { return tasks_.active() == 0; })) << tasks_.active() << " data-path tasks left";
    control_guard_.reset();
    worker_guards_.clear();
    control_.stop();
    for (auto& io : workers_) io->stop();
    control_thread_.join();
    for (auto& t : worker_threads_) t.join();
  }

  /// Runs `fn` on the control thread and waits for it.
  void on_control(const std::function<void()>& fn) {
    std::atomic<bool> ran{false};
    asio::post(control_, [&] {
      fn();
      ran = true;
    });
    EXPECT_TRUE(eventually([&] { return ran.load(); }));
  }
  /// A stand-in pod netns with `ip`, and a second, independent handle of it (what AddWorkload gets).
  struct Pod {
    std::shared_ptr<const base::Netns> netns;
    base::IpAddr ip;
    [[nodiscard]] base::Netns handle() const {
      return base::Netns::from_fd(base::UniqueFd(::dup(netns->fd())), netns->description()).value();
    }
  };
  Pod make_pod(const std::string& name, std::uint8_t host) {
    const base::IpAddr ip = base::IpAddr::v4({127, 43, next_net_, host});
    return Pod{sockets_.make_netns(name, {ip}).value(), ip};
  }

  base::Result<void> add(const std::string& uid, const Pod& pod, bool is_static = false) {
    base::Result<void> out;
    on_control([&] { out = manager_->add(uid, {uid, "default", "sa-" + uid}, pod.handle(), is_static); });
    return out;
  }
  std::vector<WorkloadManager::PodState> dump() {
    std::vector<WorkloadManager::PodState> out;
    on_control([&] { out = manager_->dump(); });
    return out;
  }
  double counter(const std::string& name) { return static_cast<double>(registry_.counter(name, "").value()); }
  std::int64_t gauge(const std::string& name) { return registry_.gauge(name, "").value(); }

  asio::io_context& control() { return control_; }
  WorkloadManager& manager() { return *manager_; }
  fakes::DirectSockets& sockets() { return sockets_; }
  telemetry::Readiness& readiness() { return readiness_; }
  telemetry::MetricsRegistry& registry() { return registry_; }
  net::DrainScope& control_tasks() { return control_tasks_; }
  proxy::WorkerLoads& loads() { return loads_; }
  const tls::testing::TempDir& dir() const { return dir_; }

 private:
  std::uint8_t next_net_ = static_cast<std::uint8_t>(::getpid() % 250 + 1);
  tls::testing::TempDir dir_;
  std::unique_ptr<tls::CertManager> certs_;
  telemetry::MetricsRegistry registry_;
  telemetry::Readiness readiness_;
  proxy::TcpMetrics tcp_metrics_{registry_};
  state::StateStore store_{state::StateSnapshot::empty()};
  fakes::DirectSockets sockets_;
  net::DrainScope tasks_{"inpod test data path"};
  net::DrainScope control_tasks_{"inpod test control"};
  proxy::WorkerLoads loads_;
  asio::io_context control_{1};
  std::vector<std::unique_ptr<asio::io_context>> workers_;
  asio::executor_work_guard<asio::io_context::executor_type> control_guard_{control_.get_executor()};
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> worker_guards_;
  std::unique_ptr<WorkloadManager> manager_;
  std::vector<std::thread> worker_threads_;
  std::thread control_thread_;
};

/// Whether something listens on `addr` (a TCP connect succeeds).
inline bool listening(const base::SocketAddr& addr) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len = net::to_sockaddr(addr, ss);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0;
}

}  // namespace meshnode::inpod::testing
