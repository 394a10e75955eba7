#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "config/local_config.hpp"
#include "rpc/endpoint.hpp"
#include "state/snapshot.hpp"

namespace meshnode::xds {

using base::Result;
using SnapshotPtr = std::shared_ptr<const state::StateSnapshot>;

/// Who we are to istiod: the Delta ADS Node (research §2.3).
struct NodeInfo {
  std::string instance_ip = "1.1.1.1";  ///< INSTANCE_IP
  std::string pod_name;                 ///< POD_NAME
  std::string pod_namespace;            ///< POD_NAMESPACE
  std::string node_name;                ///< NODE_NAME
  /// ISTIO_META_<k>=<v> with the prefix stripped: string entries of Node.metadata.
  std::map<std::string, std::string> metadata;
  /// ISTIO_METAJSON_<k>=<json>: entries parsed as JSON into Node.metadata[k].
  std::map<std::string, std::string> json_metadata;

  /// "ztunnel~<instance_ip>~<pod_name>.<pod_namespace>~<pod_namespace>.svc.cluster.local".
  [[nodiscard]] std::string id() const;
};

/// Settings of the Delta ADS client, named as the reference's env vars (research §3.1).
struct XdsOptions {
  rpc::Endpoint
      endpoint;  ///< XDS_ADDRESS, XDS_ROOT_CA, ALT_XDS_HOSTNAME, AUTH_TOKEN, CLUSTER_ID, XDS_HEADER_*
  NodeInfo node;
  /// XDS_ON_DEMAND=true: Address resources only on request (fetch_on_demand), not wildcard.
  bool on_demand = false;
  /// Reconnect backoff after a failed stream: doubles from `initial_backoff` up to `max_backoff`
  /// (10 ms → 15 s, research §2.3); benign ends reconnect after `initial_backoff`, a clean end at once.
  std::chrono::milliseconds initial_backoff{10};
  std::chrono::milliseconds max_backoff{15'000};

  /// From the environment. nullopt when XDS_ADDRESS is unset or empty (no xDS: local config only).
  /// Errc::kConfig for a bad address, XDS_ON_DEMAND other than true/false, or ISTIO_METAJSON_* that
  /// is not JSON.
  [[nodiscard]] static Result<std::optional<XdsOptions>> from_env(const rpc::Env& env);
};

/// The xDS metrics the reference exports (research §5.1), implemented by the app over its registry.
/// Called on the xDS thread.
class XdsMetrics {
 public:
  virtual ~XdsMetrics();
  /// istio_xds_connection_terminations_total{reason}: reason is "ConnectionError" (no stream
  /// could be opened), "Error" (the stream failed), "Reconnect" (a benign end: cancelled,
  /// deadline, server closing or GOAWAY) or "Complete" (the server ended the stream cleanly).
  virtual void connection_terminated(std::string_view reason) = 0;
  /// istio_xds_message_total{url} += 1 and istio_xds_message_bytes_total{url} += bytes.
  virtual void message_received(std::string_view type_url, std::size_t bytes) = 0;
};

/// One type's state for /config_dump.
struct XdsTypeStatus {
  std::string type_url;
  bool received = false;            ///< at least one response handled
  std::size_t resources = 0;        ///< accepted resources held
  std::string system_version_info;  ///< of the last response
  std::string last_nonce;           ///< of the last response
  std::string last_ack_nonce;       ///< last response ACKed in full
  std::string last_nack_nonce;      ///< last response with a rejected resource
  std::string last_nack_error;      ///< its error_detail.message ("name: reason; ...")
};

/// The client's state for /config_dump.
struct XdsStatus {
  std::string address;
  bool connected = false;            ///< a stream is open and has received a response
  bool ready = false;                ///< every non-on-demand type had its first response applied
  std::uint64_t streams = 0;         ///< streams opened so far
  std::string last_error;            ///< why the last stream ended ("" if none ended yet)
  std::vector<XdsTypeStatus> types;  ///< Address, then Authorization
};

/// Where callbacks run: the app passes `[&io](auto fn) { asio::post(io, std::move(fn)); }` for
/// its control io_context. Must run functions in the order given. Empty = on the xDS thread.
using Executor = std::function<void(std::function<void()>)>;

struct XdsCallbacks {
  Executor post;
  /// A new snapshot (local config + xDS), exactly one per response that changed something.
  std::function<void(SnapshotPtr)> on_snapshot;
  /// Once: the first response of each non-on-demand type has been applied (readiness).
  std::function<void()> on_ready;
};

/// Delta ADS client for Istio's ambient resources (research §2.3, anchors §D): one bidirectional
/// stream `AggregatedDiscoveryService/DeltaAggregatedResources` carrying both type URLs; ACK, or
/// NACK with error_detail naming each rejected resource while the rest is applied;
/// initial_resource_versions on every new stream (rejected names are not recorded); reconnect with
/// backoff; on-demand Address lookups. Conversion and snapshot building run on the client's own
/// thread ("xds"), never on a data worker; results reach the app through XdsCallbacks::post.
/// All public methods are thread-safe.
class XdsClient {
 public:
  /// Builds the channel (reads the root CA file) and the store with `local` in it.
  /// @returns Errc::kConfig for a bad local config or root CA; Errc::kIo for an unreadable file.
  [[nodiscard]] static Result<std::unique_ptr<XdsClient>> create(XdsOptions options,
                                                                 config::LocalConfig local,
                                                                 XdsCallbacks callbacks,
                                                                 XdsMetrics* metrics = nullptr);
  ~XdsClient();
  XdsClient(const XdsClient&) = delete;
  XdsClient& operator=(const XdsClient&) = delete;

  /// The snapshot before any xDS response: the local config alone.
  [[nodiscard]] SnapshotPtr initial_snapshot() const;
  /// Opens the stream (and keeps re-opening it until stop()).
  void start();
  /// Cancels the stream, fails pending on-demand lookups with Errc::kClosed, joins the thread.
  /// Idempotent. Callbacks already posted may still run.
  void stop();

  /// On-demand lookup (XDS_ON_DEMAND, research §2.3 / anchors §D.3) after a miss for `key`
  /// ("<network>/<ip>", "<namespace>/<hostname>" or a workload uid): subscribes to it and calls
  /// `done` (through XdsCallbacks::post) once a response answers it, with the snapshot that holds
  /// the answer — the caller looks the key up again there.
  /// Errors: Errc::kNotFound when the control plane answered that the key does not exist, or
  /// on-demand mode is off; Errc::kConfig when the answer was rejected (the reason is given);
  /// Errc::kTimeout "xDS on-demand lookup of '<key>' not answered within <n> ms" at `deadline`;
  /// Errc::kClosed when the client stops first.
  void fetch_on_demand(std::string key, std::chrono::steady_clock::time_point deadline,
                       std::function<void(Result<SnapshotPtr>)> done);

  /// Current state for /config_dump. Thread-safe copy.
  [[nodiscard]] XdsStatus status() const;

  struct Impl;

 private:
  explicit XdsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::xds
