#include "fakes/zds_server.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "nodeapi/zds_socket.hpp"

namespace meshnode::fakes {

using base::Errc;
using base::fail;
using base::Result;

Result<void> wait_readable(int fd, Deadline deadline) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int timeout_ms =
        static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, 60'000));
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0) return {};
    if (rc < 0 && errno != EINTR) return base::fail_errno("poll", errno);
    if (rc == 0 && std::chrono::steady_clock::now() >= deadline) {
      return fail(Errc::kTimeout, "fake zds: deadline passed waiting for fd " + std::to_string(fd));
    }
  }
}

Result<ZdsServer> ZdsServer::start(std::string path) {
  auto listener = nodeapi::listen_seqpacket(path);
  if (!listener) return std::unexpected(std::move(listener.error()));
  return ZdsServer(std::move(path), std::move(*listener));
}

ZdsServer::~ZdsServer() {
  // A moved-from server owns nothing and must not remove the socket file of its successor.
  if (listener_.valid()) ::unlink(path_.c_str());
}

ZdsServer& ZdsServer::operator=(ZdsServer&& other) noexcept {
  if (this == &other) return *this;
  if (listener_.valid()) ::unlink(path_.c_str());
  path_ = std::move(other.path_);
  listener_ = std::move(other.listener_);
  client_ = std::move(other.client_);
  return *this;
}

Result<int> ZdsServer::client() const {
  if (!client_) return fail(Errc::kClosed, "fake zds: no client connected");
  return client_.get();
}

Result<void> ZdsServer::accept_client(Deadline deadline) {
  client_.reset();
  if (auto ready = wait_readable(listener_.get(), deadline); !ready) return ready;
  auto fd = nodeapi::accept_seqpacket(listener_.get());
  if (!fd) return std::unexpected(std::move(fd.error()));
  client_ = std::move(*fd);
  return {};
}

Result<void> ZdsServer::expect_hello(Deadline deadline) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  if (auto ready = wait_readable(*fd, deadline); !ready) return ready;
  auto version = nodeapi::recv_hello(*fd);
  if (!version) return std::unexpected(std::move(version.error()));
  if (*version != nodeapi::zds::V1) {
    return fail(Errc::kProtocol,
                "fake zds: hello with version " + std::to_string(static_cast<int>(*version)));
  }
  return {};
}

Result<void> ZdsServer::add(std::string_view uid, const nodeapi::zds::WorkloadInfo& info, int netns_fd) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  return nodeapi::send_add(*fd, uid, info, netns_fd);
}

Result<void> ZdsServer::keep(std::string_view uid) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  return nodeapi::send_keep(*fd, uid);
}

Result<void> ZdsServer::del(std::string_view uid) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  return nodeapi::send_del(*fd, uid);
}

Result<void> ZdsServer::snapshot_sent() {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  return nodeapi::send_snapshot_sent(*fd);
}

Result<void> ZdsServer::send_raw(std::string_view bytes, int fd_to_pass) {
  if (fd_to_pass < 0) return send_raw(bytes, std::span<const int>{});
  const int fds[1] = {fd_to_pass};
  return send_raw(bytes, std::span<const int>(fds));
}

Result<void> ZdsServer::send_raw(std::string_view bytes, std::span<const int> fds) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  return nodeapi::send_packet(*fd, bytes, fds);
}

Result<std::string> ZdsServer::read_ack(Deadline deadline) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  if (auto ready = wait_readable(*fd, deadline); !ready) return std::unexpected(std::move(ready.error()));
  return nodeapi::recv_ack(*fd);
}

Result<void> ZdsServer::wait_client_closed(Deadline deadline) {
  auto fd = client();
  if (!fd) return std::unexpected(std::move(fd.error()));
  if (auto ready = wait_readable(*fd, deadline); !ready) return ready;
  auto packet = nodeapi::recv_message(*fd);
  if (!packet && packet.error().code == Errc::kClosed) {
    client_.reset();
    return {};
  }
  if (!packet) return std::unexpected(std::move(packet.error()));
  return fail(Errc::kProtocol, "fake zds: unexpected message (" + std::to_string(packet->bytes.size()) +
                                   " bytes) while waiting for the client to close");
}

void ZdsServer::close_client() { client_.reset(); }

}  // namespace meshnode::fakes
