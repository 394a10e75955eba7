#include "nodeapi/zds_socket.hpp"

#include <google/protobuf/message_lite.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace meshnode::nodeapi {
namespace {

using base::Errc;
using base::fail;
using base::fail_errno;
using base::Result;
using base::UniqueFd;

constexpr std::size_t kControlSpace = CMSG_SPACE(sizeof(int) * kMaxFdsPerPacket);

/// Control buffer with the alignment cmsghdr needs.
struct ControlBuffer {
  alignas(struct cmsghdr) char data[kControlSpace];
};

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Keep room for the terminating NUL: the kernel and every peer treat sun_path as a C string.
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return fail(Errc::kInvalidArgument, "unix socket path length " + std::to_string(path.size()) +
                                            " out of range 1.." + std::to_string(sizeof(addr.sun_path) - 1) +
                                            ": " + path);
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

std::unexpected<base::Error> fail_send(int err) {
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN) {
    return fail(Errc::kClosed, "zds send: peer closed", std::error_code(err, std::system_category()));
  }
  return fail_errno("zds send", err);
}

/// Moves every SCM_RIGHTS fd of `msg` into `out`; runs before any error check so that nothing the
/// kernel installed in our fd table can leak.
void take_fds(msghdr& msg, std::vector<UniqueFd>& out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const auto* data = CMSG_DATA(c);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, data + i * sizeof(int), sizeof(int));
      out.emplace_back(fd);
    }
  }
}

}  // namespace

Result<void> send_packet(int fd, std::string_view bytes, std::span<const int> fds_to_pass) {
  if (fds_to_pass.size() > kMaxFdsPerPacket) {
    return fail(Errc::kInvalidArgument, "zds send: " + std::to_string(fds_to_pass.size()) + " fds, at most " +
                                            std::to_string(kMaxFdsPerPacket));
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  ControlBuffer control{};
  if (!fds_to_pass.empty()) {
    msg.msg_control = control.data;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds_to_pass.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds_to_pass.size());
    std::memcpy(CMSG_DATA(c), fds_to_pass.data(), sizeof(int) * fds_to_pass.size());
  }
  ssize_t n = -1;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_send(errno);
  // SEQPACKET sends are atomic; a short count would mean the kernel split a record.
  if (static_cast<std::size_t>(n) != bytes.size()) {
    return fail(Errc::kIo,
                "zds send: short write " + std::to_string(n) + " of " + std::to_string(bytes.size()));
  }
  return {};
}

Result<void> send_message(int fd, const google::protobuf::MessageLite& message, int fd_to_pass) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return fail(Errc::kInternal, "zds send: cannot serialize " + message.GetTypeName());
  }
  if (fd_to_pass < 0) return send_packet(fd, bytes);
  const int fds[1] = {fd_to_pass};
  return send_packet(fd, bytes, fds);
}

Result<Received> recv_message(int fd, std::size_t max_size) {
  Received out;
  out.bytes.resize(max_size);
  iovec iov{out.bytes.data(), out.bytes.size()};
  ControlBuffer control{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data;
  msg.msg_controllen = sizeof(control.data);

  ssize_t n = -1;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    if (err == ECONNRESET) {
      return fail(Errc::kClosed, "zds recv: peer reset", std::error_code(err, std::system_category()));
    }
    return fail_errno("zds recv", err);
  }
  take_fds(msg, out.fds);
  out.bytes.resize(static_cast<std::size_t>(n));

  if ((msg.msg_flags & MSG_TRUNC) != 0) {
    return fail(Errc::kProtocol,
                "zds recv: packet truncated (larger than " + std::to_string(max_size) + " bytes)");
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return fail(Errc::kProtocol, "zds recv: control data truncated (more than " +
                                     std::to_string(kMaxFdsPerPacket) + " fds or unexpected ancillary data)");
  }
  if (n == 0 && out.fds.empty()) return fail(Errc::kClosed, "zds recv: peer closed the connection");
  return out;
}

bool is_would_block(const base::Error& error) noexcept {
  return error.code == Errc::kIo && error.cause.category() == std::system_category() &&
         (error.cause.value() == EAGAIN || error.cause.value() == EWOULDBLOCK);
}

Result<UniqueFd> connect_seqpacket(const std::string& path) {
  auto addr = unix_address(path);
  if (!addr) return std::unexpected(addr.error());
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock) return fail_errno("zds socket", errno);
  int rc = -1;
  do {
    rc = ::connect(sock.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    return fail(Errc::kConnectFailed, "zds connect " + path, std::error_code(errno, std::system_category()));
  }
  return sock;
}

Result<UniqueFd> listen_seqpacket(const std::string& path, int backlog) {
  auto addr = unix_address(path);
  if (!addr) return std::unexpected(addr.error());
  // A previous agent that died leaves its socket file behind, and bind() would fail with EADDRINUSE.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return fail_errno("zds unlink stale socket " + path, errno);
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock) return fail_errno("zds socket", errno);
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return fail_errno("zds bind " + path, errno);
  }
  if (::listen(sock.get(), backlog) != 0) return fail_errno("zds listen " + path, errno);
  return sock;
}

Result<UniqueFd> accept_seqpacket(int listen_fd) {
  int fd = -1;
  do {
    fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return fail_errno("zds accept", errno);
  return UniqueFd(fd);
}

}  // namespace meshnode::nodeapi
