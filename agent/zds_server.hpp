#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "base/netns.hpp"
#include "nodeapi/zds.hpp"

namespace meshnode::telemetry {
class Gauge;
}

namespace meshnode::agent {

/// The agent's side of Istio ZDS (research §2.2): listens on a SOCK_SEQPACKET path, and for each
/// proxy that connects reads its ZdsHello, replays the snapshot (AddWorkload+netns fd for each pod
/// whose netns the agent holds, KeepWorkload for the others), one message per Ack, then
/// SnapshotSent. Steady state: `add` goes to the newest connected proxy, `del` to all of them, so an
/// old and a new proxy can overlap during a rollover. A proxy that hangs up (EOF, error), breaks the
/// lock-step or sends anything unsolicited is dropped.
/// At most 5 proxies are accepted per second (the reference agent's limit); later ones wait in the backlog.
///
/// Threads: one internal thread accepts and watches connections; `add`, `del`, `acked` and
/// `connections` may be called from any thread (one mutex serializes every exchange on every
/// connection, so an Ack is always read by the caller that sent the request).
class ZdsServer {
 public:
  /// One pod of the snapshot. `netns` null → KeepWorkload (the agent knows the pod but holds no fd).
  struct SnapshotEntry {
    std::string uid;
    nodeapi::zds::WorkloadInfo info;
    std::shared_ptr<const base::Netns> netns;
  };
  /// Returns the pods to replay to a new proxy; called on the internal thread with the server lock
  /// held (so it must not call back into the server).
  using SnapshotFn = std::function<std::vector<SnapshotEntry>()>;

  struct Options {
    std::string path;                                    ///< socket path (stale file replaced)
    std::chrono::milliseconds hello_timeout{5000};       ///< research §2.2: 5 s for the hello
    std::chrono::milliseconds ack_timeout{5000};         ///< per request
  };

  /// Listens on `options.path` and starts the internal thread. `connected` (nullable) tracks the
  /// number of proxies past their snapshot (`ztunnel_connected`).
  /// @returns Errc::kIo / kInvalidArgument from listen_seqpacket.
  [[nodiscard]] static base::Result<std::unique_ptr<ZdsServer>> start(Options options, SnapshotFn snapshot,
                                                                     telemetry::Gauge* connected = nullptr);
  ~ZdsServer();
  ZdsServer(const ZdsServer&) = delete;
  ZdsServer& operator=(const ZdsServer&) = delete;

  /// Sends AddWorkload{uid, info}+netns fd to the newest proxy and waits for its Ack.
  /// @returns Errc::kNotFound "no ztunnel connection"; Errc::kProtocol
  ///          "proxy rejected: <ack error>" for a NACK; Errc::kTimeout / kClosed / kIo when the
  ///          exchange failed (that proxy is then dropped).
  [[nodiscard]] base::Result<void> add(std::string_view uid, const nodeapi::zds::WorkloadInfo& info,
                                       const base::Netns& netns);

  /// Sends DelWorkload{uid} to every proxy, each waiting for its Ack; failures drop that proxy and
  /// are logged, never returned (a Del cannot be refused meaningfully).
  void del(std::string_view uid);

  /// True when some connected proxy acknowledged an Add or Keep of `uid` since it connected (and no
  /// Del followed).
  [[nodiscard]] bool acked(std::string_view uid) const;

  /// Proxies connected and past their snapshot.
  [[nodiscard]] std::size_t connections() const;

  /// Stops accepting, closes every connection and joins the thread; idempotent. The socket file is
  /// removed.
  void stop();

 private:
  struct Impl;
  explicit ZdsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::agent
