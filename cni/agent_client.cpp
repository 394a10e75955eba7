#include "cni/agent_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/unique_fd.hpp"

namespace meshnode::cni {

namespace {

using base::Errc;
using base::fail;
using Clock = std::chrono::steady_clock;

/// Milliseconds left until `deadline`, at least 0, rounded up so a poll never wakes early.
int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

/// Waits for `events` on `fd` until `deadline`. Errc::kTimeout when it passes.
base::Result<void> wait_for(int fd, short events, Clock::time_point deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return {};
    if (n == 0) return fail(Errc::kTimeout, std::string("agent did not answer in time (") + what + ")");
    if (errno != EINTR) return base::fail_errno("poll", errno);
  }
}

base::Result<base::UniqueFd> connect_unix(const std::string& path, Clock::time_point deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path))
    return fail(Errc::kInvalidArgument, "socket path too long: " + path);
  std::memcpy(addr.sun_path, path.data(), path.size());
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return base::fail_errno("socket", errno);
  // A Unix-socket connect only blocks while the listener's backlog is full; SO_SNDTIMEO bounds that.
  const int ms = remaining_ms(deadline);
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) return base::fail_errno("SO_SNDTIMEO", errno);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (err == EAGAIN || err == EINPROGRESS)
      return fail(Errc::kTimeout, "connect " + path + ": backlog full");
    return fail(Errc::kConnectFailed, "connect " + path, std::error_code(err, std::generic_category()));
  }
  if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK) != 0) {
    return base::fail_errno("fcntl", errno);
  }
  return fd;
}

base::Result<void> send_all(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EINTR) {
      if (auto ok = wait_for(fd, POLLOUT, deadline, "sending the request"); !ok) return ok;
    } else {
      return base::fail_errno("send to agent", errno);
    }
  }
  return {};
}

}  // namespace

base::Result<HttpReply> post_to_agent(const AgentCall& call, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto fd = connect_unix(call.socket, deadline);
  if (!fd) return std::unexpected(fd.error());
  if (auto sent = send_all(fd->get(), build_post(call.path, call.body), deadline); !sent) {
    return std::unexpected(sent.error());
  }
  std::string received;
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd->get(), buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (auto ok = wait_for(fd->get(), POLLIN, deadline, "waiting for the response"); !ok) {
        return std::unexpected(ok.error());
      }
      continue;
    }
    if (n < 0) return base::fail_errno("recv from agent", errno);
    received.append(buf, static_cast<std::size_t>(n));
    auto reply = parse_response(received, /*eof=*/n == 0);
    if (!reply) return std::unexpected(reply.error());
    if (*reply) return std::move(**reply);
  }
}

}  // namespace meshnode::cni
