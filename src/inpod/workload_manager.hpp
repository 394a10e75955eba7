#pragma once

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <map>
#include <optional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "telemetry/metrics.hpp"
#include "telemetry/readiness.hpp"
#include "base/netns.hpp"
#include "inpod/listener_set.hpp"

namespace meshnode::inpod {

/// Who a pod is, as the node agent describes it (ZDS WorkloadInfo) or the command line does.
struct WorkloadIdentity {
  std::string name;
  std::string ns;
  std::string service_account;
};

/// The enrolled pods of this proxy and their listener sets, whatever enrolled them (ZDS or
/// --pod). Decides idempotency (same uid and same netns inode = no-op; same uid, other netns =
/// replace), keeps pods whose listeners could not start pending and retries them every 5 s, and
/// reconciles after a ZDS snapshot. Readiness shows one task per pending pod ("pod <uid>").
/// Control thread only.
class WorkloadManager {
 public:
  struct Deps {
    asio::io_context& control;
    std::vector<asio::io_context*> workers;
    proxy::ProxyInputs inputs;
    PodListenerSet::Options options;
    telemetry::Readiness& readiness;
    telemetry::MetricsRegistry& registry;
  };
  explicit WorkloadManager(Deps deps);
  ~WorkloadManager();

  /// AddWorkload: starts the pod's listeners in `netns` (or does nothing if already running in the
  /// same netns; a repeated Add of a pending pod retries at once).
  /// @returns success once the listeners run; else why they could not start (Errc::kIo naming the
  ///          port, e.g. EADDRINUSE; the netns' addresses could not be read): the pod then stays
  ///          pending and is retried every 5 s, and the error goes into the Ack.
  /// `is_static` pods (--pod) are never removed by snapshot reconciliation.
  [[nodiscard]] base::Result<void> add(const std::string& uid, const WorkloadIdentity& who, base::Netns netns,
                                       bool is_static = false);
  /// DelWorkload: closes the pod's listeners and resets its connections now. Unknown uid: no-op.
  void del(const std::string& uid);
  /// KeepWorkload: the pod is still enrolled (only meaningful before SnapshotSent).
  void keep(const std::string& uid);
  /// A new ZDS session starts: reconciliation tracks which pods it mentions.
  void begin_snapshot();
  /// SnapshotSent: removes every ZDS-enrolled pod the session did not mention (Add or Keep).
  void snapshot_sent();

  /// Closes every listener (drain starts); connections continue.
  void stop_accepting_all();
  /// Resets every connection and forgets every pod.
  void clear();
  [[nodiscard]] std::size_t active_connections() const;
  void recheck_policies(const std::shared_ptr<const state::StateSnapshot>& snapshot);

  struct PodState {
    std::string uid;
    WorkloadIdentity who;
    std::string netns;
    std::string state;  ///< "Up" | "Pending: <error>"
  };
  [[nodiscard]] std::vector<PodState> dump() const;

 private:
  struct Entry {
    std::shared_ptr<const proxy::PodInfo> pod;
    WorkloadIdentity who;
    std::unique_ptr<PodListenerSet> set;  ///< null while pending
    std::optional<base::Error> last_error;  ///< why the last start failed, while pending
    bool is_static = false;
  };
  base::Result<std::shared_ptr<const proxy::PodInfo>> describe(const std::string& uid, const WorkloadIdentity& who,
                                                               base::Netns netns) const;
  void start(Entry& entry);
  /// Success when `entry` runs, else its last start error.
  [[nodiscard]] static base::Result<void> outcome(const Entry& entry);
  void arm_retry();
  void update_gauges();

  Deps deps_;
  std::map<std::string, Entry> pods_;
  std::set<std::string> seen_;
  asio::steady_timer retry_timer_;
  bool retry_armed_ = false;
};

}  // namespace meshnode::inpod
