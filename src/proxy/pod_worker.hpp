#pragma once

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "proxy/tcp_metrics.hpp"
#include "base/netns.hpp"
#include "base/spiffe.hpp"
#include "base/unique_fd.hpp"
#include "hbone/client_pool.hpp"
#include "hbone/server.hpp"
#include "net/byte_stream.hpp"
#include "proxy/connection_log.hpp"
#include "proxy/copy.hpp"
#include "state/store.hpp"
#include "proxy/tracker.hpp"
#include "state/rbac.hpp"
#include "tls/cert_manager.hpp"

namespace meshnode::proxy {

/// An enrolled pod as the proxy serves it: who it is and the netns its listeners live in.
/// Immutable; shared by every worker serving the pod.
struct PodInfo {
  std::string uid;
  std::string name;
  std::string ns;
  base::SpiffeId identity;
  std::vector<base::IpAddr> ips;
  std::shared_ptr<const base::Netns> netns;
  /// The pod as a workload, as known when it was enrolled: the snapshot's workload with `uid`,
  /// else one made from what enrolled it (ZDS WorkloadInfo: name, namespace, service account,
  /// trust domain cluster.local; `ips` from the pod netns). Used when the current snapshot has no
  /// workload with `uid`: a pod the agent enrolled is served even if the control plane has not
  /// (yet) described it. Never null.
  std::shared_ptr<const state::Workload> workload;
};

/// Timeouts and protocol settings of the data path.
struct ProxyOptions {
  std::chrono::steady_clock::duration connect_timeout = std::chrono::seconds(10);    ///< upstream TCP
  std::chrono::steady_clock::duration handshake_timeout = std::chrono::seconds(10);  ///< inbound TLS
  h2::Settings h2;
  hbone::ClientPool::Options pool;
  /// Inbound connections reach the app from the original client's IP (IP_TRANSPARENT + bind),
  /// as ztunnel does; needs the node agent's in-pod policy routing for the replies.
  bool transparent_inbound = false;
};

/// Process-wide services the data path uses; all thread-safe.
struct ProxyShared {
  state::StateStore& state;
  tls::CertManager& certs;
  TcpMetrics& metrics;
  ProxyOptions options;
};

enum class ListenerKind { kOutbound, kInboundPlaintext, kInboundHbone, kSocks5 };
[[nodiscard]] std::string_view to_string(ListenerKind kind) noexcept;

/// A listening socket created in the pod netns, handed to a worker.
struct ListenerFd {
  ListenerKind kind;
  base::UniqueFd fd;
};

/// One pod's proxy on one worker thread: accept loops for its listeners, its HBONE client pool,
/// its live connections. Every method except `active()` must run on the worker's thread (post to
/// it). Connections live and die on this worker (DESIGN §4).
class PodWorker : public std::enable_shared_from_this<PodWorker> {
 public:
  PodWorker(asio::io_context& io, std::shared_ptr<const PodInfo> pod, const ProxyShared& shared);
  ~PodWorker();

  /// Takes the listeners and starts accepting on them.
  void start(std::vector<ListenerFd> listeners);
  /// Closes the listeners and asks inbound HBONE peers to go away (GOAWAY); open connections go on.
  void stop_accepting();
  /// Resets every open connection of this pod now.
  void abort_all();
  /// Re-authorizes every live inbound connection on `snapshot`; closes those now denied.
  void recheck_policies(const state::StateSnapshot& snapshot);
  /// Open connections (inbound + outbound). Any thread.
  [[nodiscard]] std::size_t active() const noexcept { return tracker_.size(); }

 private:
  asio::awaitable<void> accept_loop(ListenerKind kind, std::shared_ptr<asio::ip::tcp::acceptor> acceptor);
  asio::awaitable<void> handle_outbound(asio::ip::tcp::socket socket);
  asio::awaitable<void> handle_socks5(asio::ip::tcp::socket socket);
  /// Routes and carries one outbound connection whose target is known (captured or socks5).
  /// With `socks5_reply` the RFC 1928 reply is written once the upstream is (or is not) reached.
  asio::awaitable<void> serve_outbound(net::TcpStream& downstream, base::ClientAddr client, base::OrigDstAddr target,
                                       bool socks5_reply);
  /// What an outbound connection keeps while its bytes flow.
  struct OutboundTunnel {
    ConnectionRecord rec;
    std::shared_ptr<h2::Stream> tunnel;
    std::unique_ptr<net::TcpStream> plain;
    std::optional<TcpMetrics::Handle> counters;
    net::ByteStream* upstream = nullptr;  ///< tunnel or plain
  };
  /// Routes, counts and dials; with `socks5_reply`, answers the client once the upstream is up.
  /// @returns the refusal reason when the connection cannot be carried (nothing answered,
  ///          counted or logged yet: refuse_outbound does that).
  asio::awaitable<base::Result<void>> open_outbound(OutboundTunnel& t, net::TcpStream& downstream,
                                                    base::ClientAddr client, base::OrigDstAddr target,
                                                    bool socks5_reply);
  /// Ends a refused outbound connection: one open and one failed close in the metrics, one log line.
  void refuse_outbound(OutboundTunnel& t, base::Error error);
  /// The snapshot's workload for this pod, else the one it was enrolled as (never null).
  [[nodiscard]] std::shared_ptr<const state::Workload> local_workload(const state::StateSnapshot& snapshot) const;
  /// Access log + closing metrics of an outbound connection after its copy ended.
  void finish_outbound(ConnectionRecord& rec, Transferred& moved);
  asio::awaitable<void> handle_inbound_plaintext(asio::ip::tcp::socket socket);
  asio::awaitable<void> handle_hbone_connection(asio::ip::tcp::socket socket);
  asio::awaitable<void> handle_hbone_stream(std::shared_ptr<h2::Stream> stream,
                                            std::shared_ptr<const hbone::InboundConnection> conn);
  /// What an inbound HBONE connection keeps while its bytes flow.
  struct InboundTunnel {
    ConnectionRecord rec;
    std::unique_ptr<net::TcpStream> upstream;
    std::optional<TcpMetrics::Handle> counters;
    std::optional<base::Error> closed_by_policy;  ///< set by the policy re-check
  };
  /// Validates the CONNECT, authorizes it, connects to the app and answers 200; false when the
  /// stream was refused (then already answered, counted and logged).
  asio::awaitable<bool> open_inbound_hbone(InboundTunnel& t, ConnectionTracker::Guard& guard, h2::Stream& stream,
                                           const hbone::InboundConnection& conn);
  /// L4 authorization of an inbound connection to this pod (logs dry-run verdicts).
  [[nodiscard]] state::AuthzDecision authorize_inbound(const state::StateSnapshot& snapshot,
                                                       const base::ClientAddr& source,
                                                       const std::optional<base::SpiffeId>& identity,
                                                       const base::SocketAddr& destination, const std::string& id) const;
  /// A tracker re-check that re-authorizes this connection on a new snapshot; when denied it
  /// records "closed: policy change" in `closed_by_policy` (which must outlive the tracking).
  [[nodiscard]] ConnectionTracker::Recheck recheck_for(base::ClientAddr source, std::optional<base::SpiffeId> identity,
                                                       base::SocketAddr destination, std::string id,
                                                       std::optional<base::Error>& closed_by_policy) const;
  /// Access log + closing metrics of an inbound connection after its copy ended.
  void finish_inbound(ConnectionRecord& rec, Transferred& moved, std::optional<base::Error>& closed_by_policy);
  /// Connects from inside the pod netns (SO_MARK 0x539) with the connect timeout; with `client`
  /// and transparent_inbound on, from the client's address.
  asio::awaitable<base::Result<asio::ip::tcp::socket>> connect_upstream(const base::NextHop& next_hop,
                                                                        const base::ClientAddr* client = nullptr);
  [[nodiscard]] bool is_own_ip(const base::IpAddr& ip) const;
  std::string next_trace_id();

  asio::io_context& io_;
  std::shared_ptr<const PodInfo> pod_;
  ProxyShared shared_;
  hbone::ClientPool pool_;
  ConnectionTracker tracker_;
  std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::weak_ptr<h2::Session>> inbound_sessions_;
  std::mt19937_64 rng_;
  bool stopped_ = false;
};

}  // namespace meshnode::proxy
