#pragma once

// Direct (no-root) proxy tests: real PodWorkers with real listeners, real mTLS HBONE and real app
// sockets, all on loopback in the test's own namespace through fakes::DirectSockets. Each pod is
// a stand-in netns with its own 127.x.y.z address, so routes, pod IPs and peer addresses look as
// they do in a cluster. Blocking clients drive the traffic; the proxy runs on one worker thread.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.hpp"
#include "fakes/direct_sockets.hpp"
#include "unit/support/eventually.hpp"
#include "net/drain_scope.hpp"
#include "proxy/pod_worker.hpp"
#include "state/store.hpp"
#include "telemetry/metrics.hpp"
#include "tls/cert_manager.hpp"
#include "tls/local_ca.hpp"
#include "unit/tls/tls_test_util.hpp"

namespace meshnode::proxy::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing_support::eventually;

/// Sum of the series of `metric` whose line contains every string of `labels`.
inline double metric_sum(const std::string& text, const std::string& metric, const std::vector<std::string>& labels) {
  double sum = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto end = text.find('\n', pos);
    const std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    if (!line.starts_with(metric + "{") && !line.starts_with(metric + " ")) continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

/// A blocking echo server on `addr` (port 0 = ephemeral): every connection gets back what it sent,
/// then a FIN after the client's FIN. Runs on its own thread until destroyed.
class EchoServer {
 public:
  explicit EchoServer(base::SocketAddr addr) {
    listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss{};
    socklen_t len = net::to_sockaddr(addr, ss);
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(listener_.get(), 64) != 0) {
      throw std::runtime_error("echo server cannot listen on " + addr.to_string());
    }
    address_ = net::local_addr(listener_.get()).value();
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    wake_read_.reset(pipe_fds[0]);
    wake_write_.reset(pipe_fds[1]);
    thread_ = std::thread([this] { run(); });
  }
  ~EchoServer() {
    const char byte = 0;
    (void)!::write(wake_write_.get(), &byte, 1);
    thread_.join();
    for (auto& t : connections_) t.join();
  }
  [[nodiscard]] const base::SocketAddr& address() const { return address_; }
  [[nodiscard]] int accepted() const { return accepted_.load(); }

 private:
  void run() {
    for (;;) {
      pollfd fds[2] = {{wake_read_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) return;
      if (fds[0].revents != 0) return;
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      accepted_.fetch_add(1);
      connections_.emplace_back([this, fd] { echo(base::UniqueFd(fd)); });
    }
  }
  void echo(base::UniqueFd fd) {
    char buf[16 * 1024];
    for (;;) {
      pollfd fds[2] = {{wake_read_.get(), POLLIN, 0}, {fd.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 || fds[0].revents != 0) return;
      const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = ::send(fd.get(), buf + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
        if (w <= 0) return;
        off += w;
      }
    }
    ::shutdown(fd.get(), SHUT_WR);
  }

  base::UniqueFd listener_;
  base::UniqueFd wake_read_;
  base::UniqueFd wake_write_;
  base::SocketAddr address_;
  std::atomic<int> accepted_{0};
  std::thread thread_;
  std::vector<std::thread> connections_;  // only touched by run(), joined after it ended
};

/// What a blocking client saw.
struct Exchange {
  bool connected = false;
  std::string received;  ///< bytes read until EOF, reset or the deadline
  bool eof = false;      ///< clean FIN
  bool reset = false;    ///< ECONNRESET
};

/// Connects from `from_ip` to `to` (a pod listener), declaring `orig_dst` as what the app dialled
/// (when given), writes `send` (then FIN unless `keep_open`), and reads until EOF/reset/`limit`.
inline base::UniqueFd connect_from(fakes::DirectSockets& sockets, const base::IpAddr& from_ip,
                                   const base::SocketAddr& to, std::optional<base::SocketAddr> orig_dst) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len = net::to_sockaddr(base::SocketAddr{from_ip, 0}, ss);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return {};
  auto local = net::local_addr(fd.get());
  if (!local) return {};
  if (orig_dst) sockets.redirect(*local, *orig_dst);
  len = net::to_sockaddr(to, ss);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return {};
  return fd;
}

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

/// Reads until `want` bytes arrived, EOF, reset or `limit`.
inline void read_into(int fd, Exchange& out, std::size_t want = SIZE_MAX, Clock::duration limit = 10s) {
  const auto until = Clock::now() + limit;
  char buf[16 * 1024];
  while (out.received.size() < want) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) {
      out.eof = true;
      return;
    }
    if (n < 0) {
      out.reset = errno == ECONNRESET;
      return;
    }
    out.received.append(buf, static_cast<std::size_t>(n));
  }
}

/// One request: connect, send, FIN, read to the end.
inline Exchange round_trip(fakes::DirectSockets& sockets, const base::IpAddr& from_ip, const base::SocketAddr& to,
                           std::optional<base::SocketAddr> orig_dst, std::string_view send) {
  Exchange out;
  auto fd = connect_from(sockets, from_ip, to, orig_dst);
  out.connected = fd.valid();
  if (!fd) return out;
  if (!send_all(fd.get(), send)) {
    // A refusal can reset the connection before the request is even written.
    out.reset = errno == ECONNRESET || errno == EPIPE;
    return out;
  }
  ::shutdown(fd.get(), SHUT_WR);
  read_into(fd.get(), out);
  return out;
}

/// The proxy side: the process-wide inputs, one worker thread, pods started on it.
class DirectProxy {
 public:
  DirectProxy() {
    std::random_device rd;
    net_ = {127, static_cast<std::uint8_t>(rd() % 200 + 20), static_cast<std::uint8_t>(rd() % 250 + 1)};
    certs_ = tls::testing::cert_manager_in(dir_);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~DirectProxy() {
    for (auto& w : workers_) asio::post(io_, [w] {
      w->stop_accepting();
      w->abort_all();
    });
    workers_.clear();
    // Every task ends (woken by the resets) before the worker stops: nothing is left suspended.
    EXPECT_TRUE(eventually([&] { return tasks_.active() == 0; })) << tasks_.active() << " data-path tasks left";
    guard_.reset();
    io_.stop();
    thread_.join();
  }

  /// 127.a.b.<host>, this test's own addresses.
  [[nodiscard]] base::IpAddr ip(std::uint8_t host) const { return base::IpAddr::v4({net_[0], net_[1], net_[2], host}); }

  /// Enrolls a pod: its stand-in netns with `ip`, its four listeners, a PodWorker on the thread.
  /// `workload` is what it was enrolled as (used when the snapshot has no workload with its uid).
  std::shared_ptr<const PodInfo> start_pod(const state::Workload& workload, const base::IpAddr& pod_ip) {
    auto pod = std::make_shared<PodInfo>();
    pod->uid = workload.uid;
    pod->name = workload.name;
    pod->ns = workload.ns;
    pod->identity = workload.identity();
    pod->ips = {pod_ip};
    pod->netns = sockets_.make_netns(workload.name, {pod_ip}).value();
    pod->workload = std::make_shared<const state::Workload>(workload);
    std::vector<ListenerFd> fds;
    for (auto [kind, port] : {std::pair{ListenerKind::kOutbound, 15001}, std::pair{ListenerKind::kInboundPlaintext, 15006},
                              std::pair{ListenerKind::kInboundHbone, 15008}, std::pair{ListenerKind::kSocks5, 15080}}) {
      auto fd = sockets_.listener(pod->netns.get(), {base::IpAddr::v4({0, 0, 0, 0}), static_cast<std::uint16_t>(port)}, {});
      if (!fd) throw std::runtime_error(fd.error().message());
      fds.push_back({kind, std::move(*fd)});
    }
    auto worker = std::make_shared<PodWorker>(io_, pod, inputs());
    asio::post(io_, [worker, fds = std::make_shared<std::vector<ListenerFd>>(std::move(fds))] {
      worker->start(std::move(*fds));
    });
    workers_.push_back(worker);
    return pod;
  }
  /// Runs `fn` with the worker of the `index`-th started pod, on the worker thread; waits for it.
  void on_worker(std::size_t index, std::function<void(PodWorker&)> fn) {
    std::atomic<bool> ran{false};
    asio::post(io_, [w = workers_.at(index), &fn, &ran] {
      fn(*w);
      ran = true;
    });
    EXPECT_TRUE(eventually([&] { return ran.load(); }));
  }

  /// Where pod `ip`'s listener `port` (15001, 15006, 15008, 15080) really listens.
  [[nodiscard]] base::SocketAddr listener(const base::IpAddr& pod_ip, std::uint16_t port) const {
    return sockets_.bound({pod_ip, port});
  }

  void publish(std::shared_ptr<const state::StateSnapshot> snapshot) { store_.store(std::move(snapshot)); }
  /// The data-path options pods started from now on get (timeouts 3 s by default).
  [[nodiscard]] ProxyOptions& options() { return options_; }
  /// The built-in CA's directory (another LocalCa loaded from it signs with the same root).
  [[nodiscard]] const std::filesystem::path& ca_dir() const { return dir_.path(); }
  [[nodiscard]] tls::CertManager& certs() { return *certs_; }
  [[nodiscard]] std::string metrics() const { return registry_.render(); }
  [[nodiscard]] fakes::DirectSockets& sockets() { return sockets_; }
  [[nodiscard]] const net::DrainScope& tasks() const { return tasks_; }

 private:
  ProxyInputs inputs() { return ProxyInputs{store_, *certs_, tcp_metrics_, sockets_, tasks_, options_}; }
  static ProxyOptions default_options() {
    ProxyOptions options;
    options.connect_timeout = 3s;
    options.handshake_timeout = 3s;
    return options;
  }

  std::array<std::uint8_t, 3> net_{};
  tls::testing::TempDir dir_;
  std::unique_ptr<tls::CertManager> certs_;
  ProxyOptions options_ = default_options();
  telemetry::MetricsRegistry registry_;
  TcpMetrics tcp_metrics_{registry_};
  state::StateStore store_{state::StateSnapshot::empty()};
  fakes::DirectSockets sockets_;
  net::DrainScope tasks_{"direct test", nullptr};
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_{io_.get_executor()};
  std::vector<std::shared_ptr<PodWorker>> workers_;
  std::thread thread_;
};

}  // namespace meshnode::proxy::testing
