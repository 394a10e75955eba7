#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "base/unique_fd.hpp"

namespace google::protobuf {
class MessageLite;
}

namespace meshnode::nodeapi {

/// Packet framing for ZDS (Istio ZDS protocol, research §2.2): an AF_UNIX SOCK_SEQPACKET socket
/// carries one serialized protobuf message per packet, with no length prefix; file descriptors ride
/// along as SCM_RIGHTS ancillary data. Plain POSIX, no event loop: every call does one syscall and
/// honours the socket's own blocking mode, so it fits a poll() loop, an Asio descriptor or a
/// blocking test alike. All functions may be called from any thread; one socket must not be read or
/// written concurrently from two threads.

/// Default cap on a received packet. Real ZDS packets are well under 1 KiB (the reference reads into
/// 1024 bytes); anything larger than the cap is rejected as truncated.
inline constexpr std::size_t kDefaultMaxPacket = 64 * 1024;

/// At most this many fds are accepted in one packet's ancillary data; more → control data truncated.
/// ZDS carries at most one, the extra room lets us report "2 fds" precisely and close them all.
inline constexpr std::size_t kMaxFdsPerPacket = 8;

/// One received packet.
struct Received {
  std::string bytes;                ///< the packet payload, exactly as sent (may be empty)
  std::vector<base::UniqueFd> fds;  ///< SCM_RIGHTS fds in arrival order, all close-on-exec
};

/// Sends `message` as one packet, with `fd_to_pass` attached via SCM_RIGHTS when it is >= 0 (the fd
/// is duplicated into the peer; the caller keeps its own). Never raises SIGPIPE.
/// @returns Errc::kClosed if the peer is gone (EPIPE/ECONNRESET/ENOTCONN); Errc::kIo with cause
///          EAGAIN when the socket is non-blocking and full (see `is_would_block`); Errc::kIo
///          otherwise; Errc::kInternal if the message cannot be serialized.
[[nodiscard]] base::Result<void> send_message(int fd, const google::protobuf::MessageLite& message,
                                              int fd_to_pass = -1);

/// Sends raw `bytes` as one packet with every fd of `fds_to_pass` attached (in order). ZDS allows at
/// most one fd; more exist for tests and fakes that need to produce malformed packets. Errors as
/// `send_message`; Errc::kInvalidArgument if more than kMaxFdsPerPacket fds are given.
[[nodiscard]] base::Result<void> send_packet(int fd, std::string_view bytes,
                                             std::span<const int> fds_to_pass = {});

/// Receives one packet of at most `max_size` bytes. Received fds are close-on-exec
/// (MSG_CMSG_CLOEXEC) and owned by the result, so every error path closes them.
/// @returns Errc::kProtocol "packet truncated" (MSG_TRUNC, larger than `max_size`) or "control data
///          truncated" (MSG_CTRUNC, more fds than kMaxFdsPerPacket or no room for them);
///          Errc::kClosed when the peer closed the connection (a zero-length read without fds: on a
///          SEQPACKET socket an empty packet cannot be told apart from EOF, and no ZDS message
///          serializes to zero bytes) or reset it;
///          Errc::kIo with cause EAGAIN when the socket is non-blocking and nothing is queued
///          (`is_would_block` is true: poll and retry); Errc::kIo for any other failure.
[[nodiscard]] base::Result<Received> recv_message(int fd, std::size_t max_size = kDefaultMaxPacket);

/// True when `error` is the "nothing now, poll and retry" result of a non-blocking
/// recv_message/send_message/accept_seqpacket (EAGAIN/EWOULDBLOCK).
[[nodiscard]] bool is_would_block(const base::Error& error) noexcept;

/// Connects a new close-on-exec, blocking SOCK_SEQPACKET socket to the Unix socket at `path`.
/// @returns Errc::kInvalidArgument if `path` does not fit sockaddr_un; Errc::kConnectFailed with the
///          errno cause (ENOENT, ECONNREFUSED, ...) when nobody listens there; Errc::kIo otherwise.
[[nodiscard]] base::Result<base::UniqueFd> connect_seqpacket(const std::string& path);

/// Listens on a new close-on-exec, blocking SOCK_SEQPACKET socket bound to `path`. A stale socket
/// file at `path` is removed first, as the reference agent does, so a restarted agent can rebind.
/// @returns Errc::kInvalidArgument if `path` does not fit sockaddr_un; Errc::kIo naming the failed
///          step (unlink, bind, listen) otherwise.
[[nodiscard]] base::Result<base::UniqueFd> listen_seqpacket(const std::string& path, int backlog = 16);

/// Accepts one connection on `listen_fd`; the new socket is close-on-exec and blocking.
/// @returns Errc::kIo with cause EAGAIN on a non-blocking listener with nothing pending
///          (`is_would_block`); Errc::kIo otherwise.
[[nodiscard]] base::Result<base::UniqueFd> accept_seqpacket(int listen_fd);

}  // namespace meshnode::nodeapi
