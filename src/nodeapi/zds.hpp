#pragma once

#include <string>
#include <string_view>

#include "base/error.hpp"
#include "base/unique_fd.hpp"
#include "nodeapi/zds_socket.hpp"
#include "zds.pb.h"

namespace meshnode::nodeapi {

/// Typed ZDS codec (Istio ZDS protocol, research §2.2) on top of the packet framing of
/// zds_socket.hpp. Proxy side: send_hello, then decode_request / send_ack in lock-step. Agent side:
/// recv_hello, then send_add / send_keep / send_del / send_snapshot_sent, each followed by recv_ack.
/// Each helper does one syscall on the caller's socket (blocking or not, as the socket is set), so
/// `is_would_block` applies to every error returned here. Callable from any thread.
namespace zds = ::istio::workload::zds;

/// Parses and validates one agent → proxy packet.
/// Rules (issue 3): the bytes parse as a WorkloadRequest; the payload is one of add, keep, del,
/// snapshot_sent (empty or unknown oneof is an error); `add` has a non-empty uid, a WorkloadInfo and
/// exactly one fd; keep and del have a non-empty uid; no message but `add` carries an fd; no packet
/// carries more than one fd.
/// @returns the request; the Add's netns fd stays in `packet.fds[0]` for the caller to take.
///          Errc::kProtocol with a message naming the broken rule otherwise. Never throws, never
///          aborts on any input. Pure: no I/O.
[[nodiscard]] base::Result<zds::WorkloadRequest> decode_request(const Received& packet);

/// Parses one proxy → agent packet as a WorkloadResponse carrying an Ack.
/// @returns the Ack's error string (empty = success); Errc::kProtocol if the packet does not parse,
///          carries an fd, or has no ack.
[[nodiscard]] base::Result<std::string> decode_ack(const Received& packet);

/// Parses the proxy's first packet as ZdsHello.
/// @returns the announced version (the caller decides what it accepts; Istio sends V1);
///          Errc::kProtocol if the packet does not parse or carries an fd.
[[nodiscard]] base::Result<zds::Version> decode_hello(const Received& packet);

/// A human-readable name of the request's payload, e.g. "add uid=abc" or "snapshot_sent", for logs.
[[nodiscard]] std::string describe(const zds::WorkloadRequest& request);

// ---- proxy (client) side --------------------------------------------------------------------------

/// Sends ZdsHello{version=V1}, the first message a proxy sends after connecting.
/// Errors as `send_message`.
[[nodiscard]] base::Result<void> send_hello(int fd);

/// Answers the last request: WorkloadResponse{ack=Ack{error}}; an empty `error` means success.
/// Errors as `send_message`.
[[nodiscard]] base::Result<void> send_ack(int fd, std::string error);

/// A validated agent → proxy request.
struct Request {
  zds::WorkloadRequest message;
  base::UniqueFd netns;  ///< the pod netns fd of an AddWorkload (close-on-exec); empty otherwise
};

/// Receives one packet and decodes it with `decode_request`.
/// @returns the request and, for Add, its netns fd; errors of `recv_message` and `decode_request`
///          (fds of a rejected packet are closed).
[[nodiscard]] base::Result<Request> recv_request(int fd, std::size_t max_size = kDefaultMaxPacket);

// ---- agent (server) side --------------------------------------------------------------------------

/// Receives and decodes the proxy's ZdsHello. Errors of `recv_message` and `decode_hello`.
[[nodiscard]] base::Result<zds::Version> recv_hello(int fd);

/// Sends AddWorkload{uid, workload_info} with `netns_fd` attached via SCM_RIGHTS (the caller keeps
/// its fd). Errc::kInvalidArgument if `netns_fd` < 0 (an Add without an fd is a protocol violation);
/// otherwise errors as `send_message`.
[[nodiscard]] base::Result<void> send_add(int fd, std::string_view uid, const zds::WorkloadInfo& info,
                                          int netns_fd);

/// Sends KeepWorkload{uid} (snapshot replay only). Errors as `send_message`.
[[nodiscard]] base::Result<void> send_keep(int fd, std::string_view uid);

/// Sends DelWorkload{uid}. Errors as `send_message`.
[[nodiscard]] base::Result<void> send_del(int fd, std::string_view uid);

/// Sends SnapshotSent, the end of the snapshot replay. Errors as `send_message`.
[[nodiscard]] base::Result<void> send_snapshot_sent(int fd);

/// Receives and decodes one Ack. @returns its error string (empty = success); errors of
/// `recv_message` and `decode_ack`.
[[nodiscard]] base::Result<std::string> recv_ack(int fd);

}  // namespace meshnode::nodeapi
