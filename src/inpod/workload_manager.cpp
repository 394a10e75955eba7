#include "inpod/workload_manager.hpp"

#include <spdlog/spdlog.h>


namespace meshnode::inpod {
namespace {

constexpr auto kRetryInterval = std::chrono::seconds(5);

std::string pending_task(const std::string& uid) { return "pod " + uid; }

// What the proxy knows of a pod the snapshot does not describe: what enrolled it said (ZDS
// WorkloadInfo or the command line) and its netns' own addresses. Captured by the agent's rules, so
// it speaks HBONE; Kubernetes pods are "pod" workloads in the default cluster and network.
state::Workload enrolled_workload(const std::string& uid, const WorkloadIdentity& who, const base::SpiffeId& identity,
                                  const std::vector<base::IpAddr>& ips) {
  state::Workload w;
  w.uid = uid;
  w.name = who.name;
  w.ns = who.ns;
  w.service_account = identity.service_account;
  w.trust_domain = identity.trust_domain;
  w.addresses = ips;
  w.protocol = state::TunnelProtocol::kHbone;
  w.workload_type = "pod";
  return w;
}

}  // namespace

WorkloadManager::WorkloadManager(Deps deps) : deps_(std::move(deps)), retry_timer_(deps_.control) {}

WorkloadManager::~WorkloadManager() { clear(); }

base::Result<std::shared_ptr<const proxy::PodInfo>> WorkloadManager::describe(const std::string& uid,
                                                                            const WorkloadIdentity& who,
                                                                            base::Netns netns) const {
  auto pod = std::make_shared<proxy::PodInfo>();
  pod->uid = uid;
  pod->name = who.name;
  pod->ns = who.ns;
  auto snapshot = deps_.inputs.state.load();
  auto workload = snapshot->workload_by_uid(uid);
  // The control plane's view wins; without it, the identity comes from the agent's WorkloadInfo
  // and the addresses from the pod's own interfaces.
  if (workload) {
    pod->identity = workload->identity();
    pod->ips = workload->addresses;
  } else {
    pod->identity = base::SpiffeId{"cluster.local", who.ns, who.service_account.empty() ? "default" : who.service_account};
  }
  if (pod->ips.empty()) {
    auto ips = deps_.inputs.sockets.interface_addresses(netns);
    if (!ips) return std::unexpected(ips.error());
    pod->ips = std::move(*ips);
  }
  pod->workload = workload ? workload
                           : std::make_shared<const state::Workload>(enrolled_workload(uid, who, pod->identity, pod->ips));
  pod->netns = std::make_shared<const base::Netns>(std::move(netns));
  return pod;
}

base::Result<void> WorkloadManager::add(const std::string& uid, const WorkloadIdentity& who, base::Netns netns,
                                        bool is_static) {
  seen_.insert(uid);
  if (auto it = pods_.find(uid); it != pods_.end()) {
    if (*it->second.pod->netns == netns) {
      if (!it->second.set) {
        start(it->second);  // a repeated Add of a pending pod retries now
        update_gauges();
      }
      return outcome(it->second);
    }
    spdlog::info("pod={} netns changed ({} -> {}): replacing its listeners", uid, it->second.pod->netns->description(),
                 netns.description());
    del(uid);
    seen_.insert(uid);
  }
  auto pod = describe(uid, who, std::move(netns));
  if (!pod) return std::unexpected(std::move(pod.error()));
  Entry& entry = pods_[uid];
  entry.pod = std::move(*pod);
  entry.who = who;
  entry.is_static = is_static;
  start(entry);
  update_gauges();
  return outcome(entry);
}

base::Result<void> WorkloadManager::outcome(const Entry& entry) {
  if (entry.set || !entry.last_error) return {};
  return std::unexpected(*entry.last_error);
}

void WorkloadManager::start(Entry& entry) {
  auto set = PodListenerSet::start(entry.pod, deps_.workers, deps_.inputs, deps_.options);
  const auto& uid = entry.pod->uid;
  if (set) {
    entry.set = std::move(*set);
    entry.last_error.reset();
    deps_.readiness.remove_pending(pending_task(uid));
    deps_.registry.counter("workload_manager_proxies_started_total", "Pod listener sets started").inc();
    return;
  }
  entry.last_error = std::move(set.error());
  spdlog::warn("pod={} listeners could not start, retrying every {}s: {}", uid, kRetryInterval.count(),
               entry.last_error->message());
  deps_.readiness.add_pending(pending_task(uid));
  arm_retry();
}

void WorkloadManager::arm_retry() {
  if (retry_armed_) return;
  retry_armed_ = true;
  retry_timer_.expires_after(kRetryInterval);
  retry_timer_.async_wait([this](const std::error_code& ec) {
    // Cancelled: clear() ran (maybe from the destructor), so `this` may be gone; it disarmed.
    if (ec) return;
    retry_armed_ = false;
    for (auto& [uid, entry] : pods_) {
      if (!entry.set) start(entry);
    }
    update_gauges();
  });
}

void WorkloadManager::del(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return;
  deps_.readiness.remove_pending(pending_task(uid));
  if (it->second.set) {
    deps_.registry.counter("workload_manager_proxies_stopped_total", "Pod listener sets stopped").inc();
  }
  pods_.erase(it);  // the listener set's destructor closes listeners and resets connections
  spdlog::info("pod={} removed", uid);
  update_gauges();
}

void WorkloadManager::keep(const std::string& uid) { seen_.insert(uid); }

void WorkloadManager::begin_snapshot() { seen_.clear(); }

void WorkloadManager::snapshot_sent() {
  std::vector<std::string> stale;
  for (const auto& [uid, entry] : pods_) {
    if (!entry.is_static && !seen_.contains(uid)) stale.push_back(uid);
  }
  for (const auto& uid : stale) {
    spdlog::info("pod={} not in the agent's snapshot: draining it", uid);
    del(uid);
  }
}

void WorkloadManager::stop_accepting_all() {
  for (auto& [uid, entry] : pods_) {
    if (entry.set) entry.set->stop_accepting();
  }
}

void WorkloadManager::clear() {
  for (const auto& [uid, entry] : pods_) deps_.readiness.remove_pending(pending_task(uid));
  pods_.clear();
  retry_timer_.cancel();
  retry_armed_ = false;
}

std::size_t WorkloadManager::active_connections() const {
  std::size_t n = 0;
  for (const auto& [uid, entry] : pods_) {
    if (entry.set) n += entry.set->active_connections();
  }
  return n;
}

void WorkloadManager::recheck_policies(const std::shared_ptr<const state::StateSnapshot>& snapshot) {
  for (auto& [uid, entry] : pods_) {
    if (entry.set) entry.set->recheck_policies(snapshot);
  }
}

std::vector<WorkloadManager::PodState> WorkloadManager::dump() const {
  std::vector<PodState> out;
  for (const auto& [uid, entry] : pods_) {
    out.push_back({uid, entry.who, entry.pod->netns->description(), entry.set ? "Up" : "Pending: " + (entry.last_error ? entry.last_error->message() : "")});
  }
  return out;
}

void WorkloadManager::update_gauges() {
  std::int64_t active = 0;
  std::int64_t pending = 0;
  for (const auto& [uid, entry] : pods_) (entry.set ? active : pending)++;
  deps_.registry.gauge("workload_manager_active_proxy_count", "Pods with running listeners").set(active);
  deps_.registry.gauge("workload_manager_pending_proxy_count", "Pods waiting for a listener retry").set(pending);
}

}  // namespace meshnode::inpod
