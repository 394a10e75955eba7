// ZDS server: snapshot replay, steady-state Add/Del, dead-proxy detection (research §2.2).
#include "agent/zds_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "telemetry/metrics.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using base::UniqueFd;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t kMaxAcceptsPerSecond = 5;

Result<void> wait_readable(int fd, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
    if (rc > 0) return {};
    if (rc < 0 && errno != EINTR) return base::fail_errno("poll", errno);
    if (rc == 0) return fail(Errc::kTimeout, "no answer from the proxy in time");
  }
}

struct Connection {
  std::uint64_t id = 0;
  UniqueFd fd;
  std::set<std::string, std::less<>> acked;  // uids this proxy acknowledged (Add or Keep)
};

}  // namespace

struct ZdsServer::Impl {
  Options options;
  SnapshotFn snapshot;
  telemetry::Gauge* connected_gauge = nullptr;
  UniqueFd listener;
  UniqueFd wake_read, wake_write;
  std::thread thread;
  std::atomic<bool> stopped{false};

  mutable std::mutex mutex;
  std::vector<Connection> connections;  // oldest first; back() is the newest
  std::uint64_t next_id = 1;
  std::deque<Clock::time_point> recent_accepts;  // internal thread only

  // Sends one request with `send`, then reads its Ack. Lock held by the caller.
  template <class Send>
  Result<std::string> exchange(Connection& conn, Send&& send) {
    if (auto sent = send(conn.fd.get()); !sent) return std::unexpected(sent.error());
    if (auto ready = wait_readable(conn.fd.get(), Clock::now() + options.ack_timeout); !ready) {
      return std::unexpected(ready.error());
    }
    return nodeapi::recv_ack(conn.fd.get());
  }

  void drop(std::uint64_t id, const std::string& why) {
    auto it = std::ranges::find(connections, id, &Connection::id);
    if (it == connections.end()) return;
    spdlog::warn("zds: proxy connection closed conn={} reason=\"{}\"", id, why);
    connections.erase(it);
    publish();
  }

  void publish() {
    if (connected_gauge != nullptr) connected_gauge->set(static_cast<std::int64_t>(connections.size()));
  }

  void run();
  void accept_one();
  Result<void> replay(Connection& conn);
  void check_connection(std::uint64_t id);
};

void ZdsServer::Impl::run() {
  while (!stopped.load()) {
    // At most kMaxAcceptsPerSecond new proxies per second (research §2.2): a crash-looping proxy
    // must not starve the event path of the lock. While limited, the listener is left out of poll.
    const auto window_end = recent_accepts.size() < kMaxAcceptsPerSecond ? Clock::now()
                                                                          : recent_accepts.front() + 1s;
    const auto limited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(window_end - Clock::now()).count();
    std::vector<pollfd> fds{{wake_read.get(), POLLIN, 0}, {limited_ms > 0 ? -1 : listener.get(), POLLIN, 0}};
    std::vector<std::uint64_t> ids;
    {
      std::lock_guard lock(mutex);
      for (const Connection& c : connections) {
        fds.push_back({c.fd.get(), POLLIN, 0});
        ids.push_back(c.id);
      }
    }
    if (::poll(fds.data(), fds.size(), limited_ms > 0 ? static_cast<int>(limited_ms) + 1 : -1) < 0 && errno != EINTR) {
      spdlog::error("zds: poll failed errno={}", errno);
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents != 0) accept_one();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (fds[i + 2].revents != 0) check_connection(ids[i]);
    }
  }
}

// Readable or hung-up while idle. Re-checked under the lock: a request in flight on another thread
// may have consumed the readable packet (its Ack) in the meantime.
void ZdsServer::Impl::check_connection(std::uint64_t id) {
  std::lock_guard lock(mutex);
  auto it = std::ranges::find(connections, id, &Connection::id);
  if (it == connections.end()) return;
  pollfd p{it->fd.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return;
  auto packet = nodeapi::recv_message(it->fd.get());
  if (!packet) {
    drop(id, packet.error().message());
  } else {
    // The proxy must never send unsolicited messages (research §2.2).
    drop(id, "protocol error: unexpected message (" + std::to_string(packet->bytes.size()) + " bytes)");
  }
}

void ZdsServer::Impl::accept_one() {
  auto fd = nodeapi::accept_seqpacket(listener.get());
  if (!fd) {
    if (!nodeapi::is_would_block(fd.error())) spdlog::warn("zds: accept failed: {}", fd.error().message());
    return;
  }
  recent_accepts.push_back(Clock::now());
  while (recent_accepts.size() > kMaxAcceptsPerSecond) recent_accepts.pop_front();
  timeval send_timeout{static_cast<time_t>(options.ack_timeout.count() / 1000),
                       static_cast<suseconds_t>((options.ack_timeout.count() % 1000) * 1000)};
  // Without a send timeout a proxy that stops reading would block the agent's thread: refuse it.
  if (::setsockopt(fd->get(), SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout) != 0) {
    spdlog::warn("zds: cannot bound sends to a proxy (SO_SNDTIMEO): {}; closing it", std::strerror(errno));
    return;
  }
  if (auto ready = wait_readable(fd->get(), Clock::now() + options.hello_timeout); !ready) {
    spdlog::warn("zds: proxy sent no hello: {}", ready.error().message());
    return;
  }
  auto version = nodeapi::recv_hello(fd->get());
  if (!version || *version != nodeapi::zds::V1) {
    spdlog::warn("zds: bad hello from proxy: {}", version ? "unsupported version" : version.error().message());
    return;
  }
  std::lock_guard lock(mutex);
  Connection conn{next_id++, std::move(*fd), {}};
  if (auto replayed = replay(conn); !replayed) {
    spdlog::warn("zds: snapshot replay failed conn={}: {}", conn.id, replayed.error().message());
    return;
  }
  spdlog::info("zds: proxy connected conn={} pods={} proxies={}", conn.id, conn.acked.size(), connections.size() + 1);
  connections.push_back(std::move(conn));
  publish();
}

Result<void> ZdsServer::Impl::replay(Connection& conn) {
  for (const SnapshotEntry& entry : snapshot()) {
    auto ack = exchange(conn, [&](int fd) {
      return entry.netns ? nodeapi::send_add(fd, entry.uid, entry.info, entry.netns->fd())
                         : nodeapi::send_keep(fd, entry.uid);
    });
    if (!ack) return std::unexpected(ack.error());
    if (ack->empty()) {
      conn.acked.insert(entry.uid);
    } else {
      // The proxy keeps a NACKed pod pending and retries on its own (research §2.2).
      spdlog::warn("zds: proxy rejected pod in snapshot conn={} uid={} error=\"{}\"", conn.id, entry.uid, *ack);
    }
  }
  auto ack = exchange(conn, [](int fd) { return nodeapi::send_snapshot_sent(fd); });
  if (!ack) return std::unexpected(ack.error());
  if (!ack->empty()) return fail(Errc::kProtocol, "proxy rejected SnapshotSent: " + *ack);
  return {};
}

ZdsServer::ZdsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ZdsServer::~ZdsServer() { stop(); }

Result<std::unique_ptr<ZdsServer>> ZdsServer::start(Options options, SnapshotFn snapshot, telemetry::Gauge* connected) {
  auto impl = std::make_unique<Impl>();
  auto listener = nodeapi::listen_seqpacket(options.path);
  if (!listener) return std::unexpected(listener.error());
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) return base::fail_errno("pipe2", errno);
  impl->wake_read.reset(wake[0]);
  impl->wake_write.reset(wake[1]);
  if (::fcntl(listener->get(), F_SETFL, O_NONBLOCK) != 0) return base::fail_errno("fcntl O_NONBLOCK " + options.path, errno);
  impl->listener = std::move(*listener);
  impl->options = std::move(options);
  impl->snapshot = std::move(snapshot);
  impl->connected_gauge = connected;
  impl->publish();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  spdlog::info("zds: listening path={}", raw->options.path);
  return std::unique_ptr<ZdsServer>(new ZdsServer(std::move(impl)));
}

Result<void> ZdsServer::add(std::string_view uid, const nodeapi::zds::WorkloadInfo& info, const base::Netns& netns) {
  std::lock_guard lock(impl_->mutex);
  if (impl_->connections.empty()) return fail(Errc::kNotFound, "no ztunnel connection");
  Connection& newest = impl_->connections.back();
  auto ack = impl_->exchange(newest, [&](int fd) { return nodeapi::send_add(fd, uid, info, netns.fd()); });
  if (!ack) {
    auto error = ack.error();
    impl_->drop(newest.id, error.message());
    return std::unexpected(std::move(error));
  }
  if (!ack->empty()) return fail(Errc::kProtocol, "proxy rejected: " + *ack);
  newest.acked.insert(std::string(uid));
  return {};
}

void ZdsServer::del(std::string_view uid) {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::pair<std::uint64_t, std::string>> broken;
  for (Connection& conn : impl_->connections) {
    auto ack = impl_->exchange(conn, [&](int fd) { return nodeapi::send_del(fd, uid); });
    if (auto it = conn.acked.find(uid); it != conn.acked.end()) conn.acked.erase(it);
    if (!ack) {
      broken.emplace_back(conn.id, ack.error().message());
    } else if (!ack->empty()) {
      spdlog::warn("zds: proxy rejected del conn={} uid={} error=\"{}\"", conn.id, uid, *ack);
    }
  }
  for (const auto& [id, why] : broken) impl_->drop(id, why);
}

bool ZdsServer::acked(std::string_view uid) const {
  std::lock_guard lock(impl_->mutex);
  return std::ranges::any_of(impl_->connections, [&](const Connection& c) { return c.acked.contains(uid); });
}

std::size_t ZdsServer::connections() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->connections.size();
}

void ZdsServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  const char byte = 0;
  // Ignored: a write can only fail on a full pipe, which already wakes the thread.
  (void)!::write(impl_->wake_write.get(), &byte, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  std::lock_guard lock(impl_->mutex);
  impl_->connections.clear();
  impl_->publish();
  impl_->listener.reset();
  // Best effort: a leftover socket file is replaced by the next start (listen_seqpacket unlinks it).
  (void)::unlink(impl_->options.path.c_str());
}

}  // namespace meshnode::agent
