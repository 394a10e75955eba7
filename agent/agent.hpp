#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agent/event_server.hpp"
#include "nodeapi/plugin_event.hpp"
#include "agent/pod_store.hpp"
#include "agent/policy.hpp"
#include "agent/redirect.hpp"
#include "agent/zds_server.hpp"
#include "base/error.hpp"
#include "base/netns.hpp"

namespace meshnode::telemetry {
class MetricsRegistry;
class Gauge;
}  // namespace meshnode::telemetry

namespace meshnode::agent {

/// Everything meshnode-agent needs to run (flags of main.cpp; tests point the paths at temp dirs).
struct AgentOptions {
  std::string plugin_socket = "/var/run/istio-cni/pluginevent.sock";
  std::string zds_socket = "/var/run/ztunnel/ztunnel.sock";
  std::string run_dir = "/var/run/meshnode-agent";  ///< enrolled-pod records live in <run_dir>/pods
  std::string netns_root;  ///< prefix for netns paths from events (e.g. "/host" in a container)
  RedirectBackend backend = RedirectBackend::kNftables;
  RedirectConfig redirect;
  EnrollmentPolicy policy;
  std::chrono::milliseconds ack_timeout{5000};
};

/// meshnode-agent's core (issue 4): enrollment, in-pod rules, the ZDS server and the plugin-event
/// server, with the enrolled pods persisted in the run dir.
///
/// Plugin events (research §2.5), all POST with a JSON body (nodeapi/plugin_event.hpp):
/// - `/cmdadd`: 400 naming the bad field; not enrolled by policy → 200 `{"enrolled":false,...}`;
///   otherwise open the netns, apply rules, persist, AddWorkload+fd to the newest proxy and answer
///   200 `{"enrolled":true}` only after its Ack. Any failure → rules removed, record dropped, 500
///   `{"error":"<reason>"}` (fail closed: a pod never starts half-enrolled).
/// - `/cmddel`: DelWorkload to every proxy, rules removed while the netns still exists, record
///   dropped; always 200 for a valid body.
/// - `/cmdcheck`: 200 for pods the policy does not enroll; for enrolled ones 200 only when the rules
///   are in place and a connected proxy acknowledged the pod, else 500 with the reason.
///
/// Startup (restart safety, research §6.5): every record of the run dir is re-opened from its netns
/// path; rules are checked and re-applied only when missing; the pod then goes into every new
/// proxy's snapshot (Add with fd, or Keep when its netns is gone).
///
/// Threads: events are handled on the event server's thread; snapshots run on the ZDS thread; the
/// pod table has its own mutex. `ready`/`enrolled_pods` from any thread.
class Agent {
 public:
  /// Loads the run dir, restores pods, starts the ZDS and event servers. `metrics` must outlive
  /// the agent. Errc::kIo/kInvalidArgument when a socket or the run dir cannot be set up.
  [[nodiscard]] static base::Result<std::unique_ptr<Agent>> start(AgentOptions options,
                                                                 telemetry::MetricsRegistry& metrics);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Routes one plugin-event request (what the event server calls).
  [[nodiscard]] EventResponse handle(const EventRequest& request);

  /// True while both the event server and the ZDS server are up.
  [[nodiscard]] bool ready() const;
  [[nodiscard]] std::size_t enrolled_pods() const;
  [[nodiscard]] std::size_t proxy_connections() const;

  /// Stops both servers (pods, rules and records stay: a restarted agent picks them up).
  void stop();

  /// Uninstall (issue 14): for every enrolled pod, removes our rules from its netns (while that is
  /// still the pod's), tells every proxy to drop it (DelWorkload) and erases its record. The pods
  /// keep running with plain, uncaptured traffic. Call with the plugin entry already gone, so no
  /// ADD arrives meanwhile. @returns how many pods were released. Blocking; one thread.
  std::size_t release_all_pods();

 private:
  struct Pod {
    PodRecord record;
    std::shared_ptr<const base::Netns> netns;  ///< null when the netns could not be re-opened
  };

  Agent(AgentOptions options, telemetry::MetricsRegistry& metrics, PodStore store);
  EventResponse handle_add(const nodeapi::PluginEvent& event);
  EventResponse handle_del(const nodeapi::PluginEvent& event);
  EventResponse handle_check(const nodeapi::PluginEvent& event);
  EventResponse fail_add(const PodRecord& record, const base::Netns& netns, const std::string& reason);
  void restore_pods();
  std::vector<ZdsServer::SnapshotEntry> snapshot() const;
  void put_pod(Pod pod);
  std::optional<Pod> take_pod(const std::string& uid);
  std::optional<Pod> find_pod(const std::string& uid) const;
  [[nodiscard]] base::Result<base::Netns> open_netns(const std::string& path) const;
  void count(const std::string& event, int status);

  AgentOptions options_;
  telemetry::MetricsRegistry& metrics_;
  telemetry::Gauge& enrolled_gauge_;
  PodStore store_;
  std::unique_ptr<Redirector> redirector_;
  std::unique_ptr<ZdsServer> zds_;
  std::unique_ptr<EventServer> events_;

  mutable std::mutex mutex_;
  std::map<std::string, Pod> pods_;  // by uid
};

/// WorkloadInfo of a pod record (name, namespace, service account).
[[nodiscard]] nodeapi::zds::WorkloadInfo workload_info(const PodRecord& record);

}  // namespace meshnode::agent
