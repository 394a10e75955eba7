#pragma once

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/address_roles.hpp"
#include "base/error.hpp"
#include "h2/session.hpp"
#include "hbone/client_pool.hpp"
#include "proxy/handshake_limiter.hpp"
#include "proxy/inputs.hpp"
#include "proxy/tracker.hpp"
#include "state/snapshot.hpp"

namespace meshnode::proxy {

/// A W3C trace id (128 random bits): the connection id in every log line of a connection and, on
/// outbound HBONE, the trace id of the traceparent sent upstream.
struct TraceId {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;
  /// 32 lowercase hex digits.
  [[nodiscard]] std::string hex() const;
};

/// The TCP MSS for an interface MTU (bytes): MTU − IP header − TCP header − 12 bytes of TCP
/// timestamps, e.g. 1448 for MTU 1500 over IPv4; 0 when the MTU is too small to be real. Pure.
[[nodiscard]] int mss_for_mtu(int mtu, bool ipv4);

/// What the paths of one pod on one worker share (Outbound, Socks5, Inbound, InboundPassthrough):
/// the pod, the process-wide inputs, the HBONE client pool, the live connections, the worker's
/// io_context. Worker thread only, except `tracker.size()`. Owned by the PodWorker; the paths
/// hold a reference, the tasks keep the PodWorker alive.
struct PodContext {
  PodContext(asio::io_context& io, std::shared_ptr<const PodInfo> pod, const ProxyInputs& inputs);

  asio::io_context& io;
  std::shared_ptr<const PodInfo> pod;
  ProxyInputs inputs;
  hbone::ClientPool pool;
  ConnectionTracker tracker;
  HandshakeLimiter handshakes;  ///< inbound HBONE (15008) handshakes in progress
  std::vector<std::weak_ptr<h2::Session>> inbound_sessions;  ///< for drain (GOAWAY) and abort
  bool stopped = false;                                       ///< listeners closed: drain new sessions

  [[nodiscard]] TraceId next_trace_id();
  /// A uniformly random 64-bit word (load balancing, traceparent parent ids).
  [[nodiscard]] std::uint64_t random() { return rng_(); }
  /// The snapshot's workload for this pod, else the one it was enrolled as (never null).
  [[nodiscard]] std::shared_ptr<const state::Workload> local_workload(const state::StateSnapshot& snapshot) const;
  /// Whether `ip` is one of the pod's IPs.
  [[nodiscard]] bool is_own_ip(const base::IpAddr& ip) const;
  /// Connects from inside the pod netns (SO_MARK 0x539) within the connect timeout; with
  /// `client` and transparent_inbound on, from the client's address.
  /// @returns the connected socket; Errc::kTimeout, kConnectFailed (errno cause) or kIo.
  [[nodiscard]] asio::awaitable<base::Result<asio::ip::tcp::socket>> connect_upstream(
      const base::NextHop& next_hop, const base::ClientAddr* client = nullptr);

 private:
  /// Sets TCP_MAXSEG on the unconnected socket `fd` (created in the pod netns) to the MSS of the
  /// pod's interface. The hop from the proxy to the app runs over the pod's loopback (MSS 32741):
  /// an app with a small receive buffer (SO_RCVBUF 4096) never opens a window of one such segment
  /// and the transfer crawls on zero-window probes (issue 11 defect 6: 3.2 MB took > 60 s).
  void clamp_in_pod_mss(int fd, bool ipv4);

  std::mt19937_64 rng_;
  std::optional<int> in_pod_mtu_;  ///< largest non-loopback MTU in the pod netns (0 = none)
};

}  // namespace meshnode::proxy
