#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.hpp"
#include "base/unique_fd.hpp"
#include "nodeapi/zds.hpp"

namespace meshnode::fakes {

/// Absolute deadline for the blocking steps of a fake; steady clock, as everywhere in meshnode.
using Deadline = std::chrono::steady_clock::time_point;

/// `now + after`, for call sites: `server.read_ack(fakes::in(2s))`.
[[nodiscard]] inline Deadline in(std::chrono::steady_clock::duration after) {
  return std::chrono::steady_clock::now() + after;
}

/// A programmable ZDS server: the node agent's side of Istio ZDS (research §2.2), driven by a test
/// one step at a time. It listens on a SOCK_SEQPACKET path, serves one client at a time, and does
/// exactly what the test says: it neither replays a snapshot nor waits for acks on its own, so a test
/// can also break the protocol (send_raw) and observe how the proxy reacts.
/// Every wait is a poll() with a deadline (Errc::kTimeout when it passes); no sleeps. Move-only;
/// removes its socket file in the destructor. Not thread-safe: one test thread drives it.
class ZdsServer {
 public:
  /// Listens on `path` (a stale socket file is replaced).
  [[nodiscard]] static base::Result<ZdsServer> start(std::string path);

  ZdsServer(ZdsServer&&) noexcept = default;
  /// Stops the server being replaced (its socket file is removed) and takes over `other`.
  ZdsServer& operator=(ZdsServer&& other) noexcept;
  ~ZdsServer();

  /// Waits for the next client and makes it the current one (an earlier client is closed first).
  [[nodiscard]] base::Result<void> accept_client(Deadline deadline);

  /// Reads the client's first packet and checks it is ZdsHello{V1}: Errc::kProtocol otherwise.
  [[nodiscard]] base::Result<void> expect_hello(Deadline deadline);

  /// Sends AddWorkload{uid, info} with `netns_fd` attached (the server keeps no copy).
  [[nodiscard]] base::Result<void> add(std::string_view uid, const nodeapi::zds::WorkloadInfo& info,
                                       int netns_fd);
  /// Sends KeepWorkload{uid}.
  [[nodiscard]] base::Result<void> keep(std::string_view uid);
  /// Sends DelWorkload{uid}.
  [[nodiscard]] base::Result<void> del(std::string_view uid);
  /// Sends SnapshotSent.
  [[nodiscard]] base::Result<void> snapshot_sent();

  /// Sends `bytes` as one packet with `fd` attached when >= 0 (malformed frames, fds on the wrong
  /// message).
  [[nodiscard]] base::Result<void> send_raw(std::string_view bytes, int fd = -1);
  /// Sends `bytes` as one packet with every fd of `fds` attached (e.g. two fds on an Add).
  [[nodiscard]] base::Result<void> send_raw(std::string_view bytes, std::span<const int> fds);

  /// Waits for and decodes the client's answer to the last request.
  /// @returns the Ack's error string (empty = success); Errc::kTimeout at the deadline;
  ///          Errc::kClosed if the client disconnected; Errc::kProtocol for a non-Ack packet.
  [[nodiscard]] base::Result<std::string> read_ack(Deadline deadline);

  /// Waits until the current client disconnects (EOF), discarding nothing: any packet that arrives
  /// first is Errc::kProtocol ("unexpected message", as the reference agent treats unsolicited data).
  [[nodiscard]] base::Result<void> wait_client_closed(Deadline deadline);

  /// Closes the current client connection (the proxy sees EOF).
  void close_client();

  /// Hands the current client connection to the caller, still open, so that the next
  /// accept_client() does not close it: a real agent keeps one connection per proxy, e.g. while a
  /// second proxy for the same node starts (restart hand-off). The server forgets it.
  [[nodiscard]] base::UniqueFd release_client() noexcept { return std::move(client_); }

  [[nodiscard]] bool has_client() const noexcept { return client_.valid(); }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// The current client socket, for tests that speak the protocol by hand. -1 if none.
  [[nodiscard]] int client_fd() const noexcept { return client_.get(); }

 private:
  ZdsServer(std::string path, base::UniqueFd listener)
      : path_(std::move(path)), listener_(std::move(listener)) {}
  [[nodiscard]] base::Result<int> client() const;

  std::string path_;
  base::UniqueFd listener_;
  base::UniqueFd client_;
};

/// Waits until `fd` is readable (or hung up) or `deadline` passes. Errc::kTimeout at the deadline,
/// Errc::kIo if poll fails. Shared by the fake and tests that drive a client by hand.
[[nodiscard]] base::Result<void> wait_readable(int fd, Deadline deadline);

}  // namespace meshnode::fakes
