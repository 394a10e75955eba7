#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.hpp"
#include "base/netns.hpp"
#include "base/spiffe.hpp"
#include "base/unique_fd.hpp"
#include "h2/session.hpp"
#include "hbone/client_pool.hpp"
#include "hbone/reset_budget.hpp"
#include "net/drain_scope.hpp"
#include "net/socket_factory.hpp"
#include "proxy/tcp_metrics.hpp"
#include "proxy/worker_loads.hpp"
#include "state/store.hpp"
#include "state/workload.hpp"
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

/// XDS_ON_DEMAND: asks the control plane about an address the snapshot does not know (anchors §D.3).
/// Implemented by the app over xds::XdsClient. Thread-safe.
class OnDemandLookup {
 public:
  using Done = std::function<void(base::Result<std::shared_ptr<const state::StateSnapshot>>)>;
  virtual ~OnDemandLookup() = default;
  /// Subscribes to `key` ("<network>/<ip>"); `done` runs once, on any thread, with the snapshot
  /// that holds the answer, or Errc::kNotFound (the control plane does not know it), kTimeout at
  /// `deadline`, or another error naming the key.
  virtual void lookup(std::string key, std::chrono::steady_clock::time_point deadline, Done done) = 0;
};

/// Timeouts and protocol settings of the data path.
struct ProxyOptions {
  std::chrono::steady_clock::duration connect_timeout = std::chrono::seconds(10);    ///< upstream TCP
  std::chrono::steady_clock::duration handshake_timeout = std::chrono::seconds(10);  ///< inbound TLS
  /// Concurrent inbound TLS handshakes per pod listener (per worker) and per source IP on it; a
  /// connection over a bound is closed at once (issue 11 defect 9). ≈ 49 KiB each while stalled.
  std::size_t max_handshakes_per_listener = 128;
  std::size_t max_handshakes_per_source = 16;
  /// On a full listener, the oldest handshake in progress for at least this long is aborted to let
  /// a new one in (counted as reason "evicted"): stalling sources cannot lock the listener.
  std::chrono::steady_clock::duration handshake_evict_after = std::chrono::seconds(1);
  h2::Settings h2;
  hbone::ClientPool::Options pool;
  /// Stream-reset budgets per peer identity, shared by every pod's inbound HBONE listener.
  std::shared_ptr<hbone::PeerResetBudgets> reset_budgets = std::make_shared<hbone::PeerResetBudgets>();
  /// Inbound connections reach the app from the original client's IP (IP_TRANSPARENT + bind),
  /// as ztunnel does; needs the node agent's in-pod policy routing for the replies.
  bool transparent_inbound = false;
  /// How long an outbound connection to an unknown address waits for an on-demand answer.
  std::chrono::steady_clock::duration on_demand_timeout = std::chrono::seconds(5);
  /// Bytes the app sent before its HBONE tunnel is up ride with the CONNECT, on routes whose
  /// peer takes them (state::Route::early_data); false waits for the 200 first, as ztunnel does.
  bool hbone_early_data = true;
};

/// What every path of every pod takes from the process (the reference's ProxyInputs): the state,
/// the certificates, the metrics, where sockets come from, and the scope every connection,
/// session and accept loop of the data path is spawned in. All thread-safe; all outlive every
/// pod worker.
struct ProxyInputs {
  state::StateStore& state;
  tls::IdentitySource& certs;  ///< ca::CertificateManager in the proxy
  TcpMetrics& metrics;
  net::SocketFactory& sockets;
  net::DrainScope& tasks;
  ProxyOptions options;
  /// Set in on-demand mode (XDS_ON_DEMAND=true); null = a miss is passthrough at once.
  OnDemandLookup* on_demand = nullptr;
  /// Open connections per data worker, for balancing accepted connections across a pod's
  /// per-worker listeners (PodWorker); null = each connection stays where it was accepted.
  WorkerLoads* loads = nullptr;
};

/// The four listeners of a pod (DESIGN §1 ports).
enum class ListenerKind { kOutbound, kInboundPlaintext, kInboundHbone, kSocks5 };
/// "outbound" | "inbound_plaintext" | "inbound_hbone" | "socks5".
[[nodiscard]] std::string_view to_string(ListenerKind kind) noexcept;

/// A listening socket created in the pod netns, handed to a worker.
struct ListenerFd {
  ListenerKind kind;
  base::UniqueFd fd;
};

}  // namespace meshnode::proxy
