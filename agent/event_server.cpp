// Blocking HTTP/1.1 over AF_UNIX for the CNI plugin events. The request head is parsed with the
// http library's parser (pure functions); its HttpServer itself only listens on TCP.
#include "agent/event_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include "base/unique_fd.hpp"
#include "http/http_message.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using base::UniqueFd;
using Clock = std::chrono::steady_clock;

// The socket's directory is part of the trust boundary: 0700 and ours, so nobody else can reach
// (or replace) the socket file even for the instant between bind and chmod.
Result<void> prepare_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(Errc::kIo, "mkdir " + dir.string(), ec);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return base::fail_errno("stat " + dir.string(), errno);
  if (!S_ISDIR(st.st_mode)) return fail(Errc::kInvalidArgument, "plugin socket directory " + dir.string() + " is not a directory");
  if (st.st_uid != ::geteuid()) {
    return fail(Errc::kInvalidArgument, "plugin socket directory " + dir.string() + " is owned by uid " +
                                            std::to_string(st.st_uid) + ", not by this agent");
  }
  if ((st.st_mode & S_ISVTX) != 0) {
    return fail(Errc::kInvalidArgument, "plugin socket directory " + dir.string() +
                                            " is a shared sticky directory; give the socket a directory of its own");
  }
  if ((st.st_mode & 07777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) return base::fail_errno("chmod " + dir.string(), errno);
  return {};
}

Result<UniqueFd> listen_unix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return fail(Errc::kInvalidArgument, "socket path too long: " + path);
  const std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  if (auto prepared = prepare_directory(dir); !prepared) return std::unexpected(prepared.error());
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return base::fail_errno("unlink " + path, errno);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return base::fail_errno("socket", errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return base::fail_errno("bind " + path, errno);
  if (::chmod(path.c_str(), 0600) != 0) return base::fail_errno("chmod " + path, errno);
  if (::listen(fd.get(), 64) != 0) return base::fail_errno("listen " + path, errno);
  return fd;
}

EventResponse error_response(int status, std::string_view why) {
  return {status, "{\"error\":\"" + std::string(why) + "\"}\n", "application/json"};
}

struct ReadOutcome {
  std::optional<EventRequest> request;
  std::optional<EventResponse> error;  // set when the request was unusable; nullopt + no request → just close
};

}  // namespace

struct EventServer::Impl {
  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  std::string path;
  EventHandler handler;
  EventServerLimits limits;
  EventServerAccess access;
  UniqueFd listener, wake_read, wake_write;
  std::thread thread;
  std::atomic<bool> stopped{false};
  std::mutex handler_mutex;      // one handler call at a time
  std::list<Connection> connections;  // accept thread only (and stop after it joined)

  void run();
  void accept_one();
  void reap(bool all);
  void refuse(const UniqueFd& conn, int status, std::string_view why, std::string_view reason);
  void serve(UniqueFd conn, pid_t peer_pid);
  bool wait_for(int fd, short events, Clock::time_point deadline) const;
  ReadOutcome read_request(int fd, Clock::time_point deadline);
  void write_response(int fd, const EventResponse& response, Clock::time_point deadline);
};

// Waits for `events` on `fd` until `deadline`; false on timeout, error or stop().
bool EventServer::Impl::wait_for(int fd, short events, Clock::time_point deadline) const {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    // The wake pipe is never drained, so once stop() wrote it every waiter sees it.
    pollfd p[2] = {{fd, events, 0}, {wake_read.get(), POLLIN, 0}};
    const int rc = ::poll(p, 2, static_cast<int>(left));
    if (rc > 0) return p[1].revents == 0;
    if (rc < 0 && errno != EINTR) return false;
  }
}

void EventServer::Impl::run() {
  while (!stopped.load()) {
    pollfd fds[2] = {{wake_read.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    reap(/*all=*/false);
    if (fds[1].revents != 0) accept_one();
  }
}

void EventServer::Impl::reap(bool all) {
  for (auto it = connections.begin(); it != connections.end();) {
    if (all || it->done.load()) {
      it->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
}

// Best effort: the refused peer gets a status line if its socket takes it right now; we never wait
// on a client we do not serve.
void EventServer::Impl::refuse(const UniqueFd& conn, int status, std::string_view why, std::string_view reason) {
  http::HttpResponse http;
  http.status = status;
  http.content_type = "application/json";
  http.body = error_response(status, why).body;
  const std::string bytes = http::serialize_response(http, /*keep_alive=*/false, /*head_only=*/false);
  if (access.on_refused) access.on_refused(reason);  // counted before the peer can see the answer
  (void)!::send(conn.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void EventServer::Impl::accept_one() {
  UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!conn) return;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    spdlog::warn("plugin event: connection refused: SO_PEERCRED failed: {}", std::strerror(errno));
    refuse(conn, 403, "peer credentials unavailable", "peer_uid");
    return;
  }
  if (cred.uid != access.peer_uid) {
    spdlog::warn("plugin event: connection refused: peer pid={} uid={} is not uid {}", cred.pid, cred.uid, access.peer_uid);
    refuse(conn, 403, "only uid " + std::to_string(access.peer_uid) + " may post plugin events", "peer_uid");
    return;
  }
  if (connections.size() >= limits.max_connections) {
    spdlog::warn("plugin event: connection refused: {} connections already open", connections.size());
    refuse(conn, 503, "too many open connections", "overload");
    return;
  }
  Connection& slot = connections.emplace_back();
  slot.thread = std::thread([this, &slot, fd = std::move(conn), pid = cred.pid]() mutable {
    serve(std::move(fd), pid);
    slot.done.store(true);  // joined by the accept loop at its next wake-up, or by stop()
  });
}

ReadOutcome EventServer::Impl::read_request(int fd, Clock::time_point deadline) {
  std::string buffer;
  http::HeadParse parsed;
  char chunk[4096];
  while (true) {
    parsed = http::parse_request_head(buffer);
    if (parsed.status == http::HeadStatus::kComplete) break;
    if (parsed.status == http::HeadStatus::kBad) return {std::nullopt, error_response(400, "malformed request")};
    if (parsed.status == http::HeadStatus::kTooLarge || buffer.size() > limits.max_head_bytes) {
      return {std::nullopt, error_response(431, "request head too large")};
    }
    if (!wait_for(fd, POLLIN, deadline)) return {};
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) return {};
    if (n > 0) buffer.append(chunk, static_cast<std::size_t>(n));
  }
  const http::ParsedHead& head = parsed.head;
  if (head.has_transfer_encoding) return {std::nullopt, error_response(501, "transfer-encoding not supported")};
  if (head.content_length > limits.max_body_bytes) return {std::nullopt, error_response(413, "body too large")};
  EventRequest request{head.request.method, head.request.path, buffer.substr(head.head_bytes)};
  while (request.body.size() < head.content_length) {
    if (!wait_for(fd, POLLIN, deadline)) return {};
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) return {};
    if (n > 0) request.body.append(chunk, static_cast<std::size_t>(n));
  }
  request.body.resize(head.content_length);
  return {std::move(request), std::nullopt};
}

void EventServer::Impl::write_response(int fd, const EventResponse& response, Clock::time_point deadline) {
  http::HttpResponse http;
  http.status = response.status;
  http.content_type = response.content_type;
  http.body = response.body;
  const std::string bytes = http::serialize_response(http, /*keep_alive=*/false, /*head_only=*/false);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    if (!wait_for(fd, POLLOUT, deadline)) return;
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return;
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
}

void EventServer::Impl::serve(UniqueFd conn, pid_t peer_pid) {
  auto outcome = read_request(conn.get(), Clock::now() + limits.io_timeout);
  EventResponse response;
  if (outcome.error) {
    response = *outcome.error;
  } else if (!outcome.request) {
    spdlog::debug("plugin event: connection closed or timed out before a full request pid={}", peer_pid);
    return;
  } else {
    outcome.request->peer_pid = peer_pid;
    std::lock_guard lock(handler_mutex);
    if (stopped.load()) return;
    try {
      response = handler(*outcome.request);
    } catch (const std::exception& e) {
      response = error_response(500, "internal error");
      spdlog::error("plugin event: handler threw: {}", e.what());
    }
  }
  write_response(conn.get(), response, Clock::now() + limits.io_timeout);
}

EventServer::EventServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EventServer::~EventServer() { stop(); }

Result<std::unique_ptr<EventServer>> EventServer::start(std::string path, EventHandler handler, EventServerLimits limits,
                                                        EventServerAccess access) {
  auto impl = std::make_unique<Impl>();
  auto listener = listen_unix(path);
  if (!listener) return std::unexpected(listener.error());
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) return base::fail_errno("pipe2", errno);
  impl->wake_read.reset(wake[0]);
  impl->wake_write.reset(wake[1]);
  impl->listener = std::move(*listener);
  impl->path = std::move(path);
  impl->handler = std::move(handler);
  impl->limits = limits;
  impl->access = std::move(access);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  spdlog::info("plugin event server: listening path={} peer_uid={}", raw->path, raw->access.peer_uid);
  return std::unique_ptr<EventServer>(new EventServer(std::move(impl)));
}

void EventServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  const char byte = 0;
  // Ignored: a write can only fail on a full pipe, which already wakes every waiter.
  (void)!::write(impl_->wake_write.get(), &byte, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->reap(/*all=*/true);
  impl_->listener.reset();
  // Best effort: a leftover socket file is replaced by the next start (listen_unix unlinks it).
  (void)::unlink(impl_->path.c_str());
}

}  // namespace meshnode::agent
