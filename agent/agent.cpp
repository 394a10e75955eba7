// meshnode-agent core: plugin events → enrollment → rules → ZDS, with restart safety.
#include "agent/agent.hpp"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "agent/pod_netns.hpp"
#include "agent/responses.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::Result;
using nlohmann::json;


PodRecord record_of(const nodeapi::PluginEvent& event) {
  PodRecord record{event.pod_uid, event.pod_name, event.pod_namespace, event.service_account, event.netns, {}};
  for (const nodeapi::PodIp& ip : event.ips) record.ips.push_back(ip.ip.to_string());
  return record;
}

}  // namespace

EventResponse json_response(int status, const nlohmann::json& body) {
  return {status, body.dump() + "\n", "application/json"};
}
EventResponse error_response(int status, const std::string& reason) { return json_response(status, {{"error", reason}}); }

nodeapi::zds::WorkloadInfo workload_info(const PodRecord& record) {
  nodeapi::zds::WorkloadInfo info;
  info.set_name(record.name);
  info.set_namespace_(record.namespace_);
  info.set_service_account(record.service_account);
  return info;
}

Agent::Agent(AgentOptions options, telemetry::MetricsRegistry& metrics, PodStore store, base::Netns agent_netns)
    : options_(std::move(options)),
      metrics_(metrics),
      enrolled_gauge_(metrics.gauge("meshnode_agent_enrolled_pods", "Pods enrolled by this node agent.")),
      agent_netns_(std::move(agent_netns)),
      store_(std::move(store)),
      redirector_(make_redirector(options_.backend, options_.redirect)) {
  if (options_.host_probe_snat) host_rules_ = make_host_probe_rules(options_.backend, options_.redirect);
}

Agent::~Agent() { stop(); }

Result<std::unique_ptr<Agent>> Agent::start(AgentOptions options, telemetry::MetricsRegistry& metrics) {
  auto store = PodStore::open(options.run_dir);
  if (!store) return std::unexpected(store.error());
  auto own_netns = base::Netns::current();
  if (!own_netns) return std::unexpected(own_netns.error());
  std::unique_ptr<Agent> agent(new Agent(std::move(options), metrics, std::move(*store), std::move(*own_netns)));
  agent->restore_pods();
  if (agent->host_rules_) {
    agent->sync_host_rules();
    agent->host_thread_ = std::thread([raw = agent.get()] { raw->run_host_reconcile(); });
  }
  if (agent->options_.kube) {
    auto watch = KubeWatch::start(*agent->options_.kube, metrics);
    if (!watch) return std::unexpected(watch.error());
    agent->kube_ = std::move(*watch);
  }
  auto& connected = metrics.gauge("ztunnel_connected", "Node proxies connected over ZDS.");
  ZdsServer::Options zds_options{agent->options_.zds_socket, std::chrono::milliseconds(5000), agent->options_.ack_timeout};
  Agent* raw = agent.get();
  auto zds = ZdsServer::start(std::move(zds_options), [raw] { return raw->snapshot(); }, &connected);
  if (!zds) return std::unexpected(zds.error());
  agent->zds_ = std::move(*zds);
  EventServerAccess access = agent->options_.plugin_access;
  access.on_refused = [&metrics](std::string_view reason) {
    metrics
        .counter("meshnode_agent_plugin_connections_refused_total",
                 "Plugin-socket connections refused before any request was read, by reason (peer_uid, overload).",
                 {{"reason", std::string(reason)}})
        .inc();
  };
  auto events = EventServer::start(
      agent->options_.plugin_socket, [raw](const EventRequest& r) { return raw->handle(r); }, {}, std::move(access));
  if (!events) return std::unexpected(events.error());
  agent->events_ = std::move(*events);
  if (agent->kube_) {
    // Records first: a pod deleted while the agent was down is no longer in the cache.
    for (const auto& entry : agent->snapshot()) {
      if (auto pod = agent->find_pod(entry.uid)) agent->kube_->enqueue(pod->record.namespace_ + "/" + pod->record.name);
    }
    agent->kube_->start_queue([raw](const std::string& key) { raw->reconcile(key); });
  }
  return agent;
}

void Agent::stop() {
  if (events_) events_->stop();
  if (kube_) kube_->stop();
  if (zds_) zds_->stop();
  {
    std::lock_guard lock(host_mutex_);
    host_stop_ = true;
    host_cv_.notify_all();
  }
  if (host_thread_.joinable()) host_thread_.join();
}

std::vector<base::IpAddr> Agent::enrolled_ips() const {
  std::lock_guard lock(mutex_);
  std::vector<base::IpAddr> ips;
  for (const auto& [uid, pod] : pods_) {
    for (const std::string& text : pod.record.ips) {
      if (auto ip = base::IpAddr::parse(text)) ips.push_back(*ip);
    }
  }
  return ips;
}

void Agent::sync_host_rules() {
  if (!host_rules_) return;
  const auto ips = enrolled_ips();
  std::lock_guard lock(host_mutex_);
  if (auto synced = host_rules_->sync(ips); !synced) {
    spdlog::error("host probe rules: {} (kubelet probes to enrolled pods may be refused)", synced.error().message());
  }
}

// An outside tool (a firewall reload, `nft flush ruleset`) may remove the host rules at any time;
// they are checked every interval and put back without touching the pods.
void Agent::run_host_reconcile() {
  std::unique_lock lock(host_mutex_);
  while (!host_cv_.wait_for(lock, options_.host_rules_interval, [&] { return host_stop_; })) {
    lock.unlock();
    const auto ips = enrolled_ips();
    lock.lock();
    if (host_stop_) return;
    if (auto intact = host_rules_->check(ips); !intact) {
      spdlog::warn("host probe rules: {}; putting them back", intact.error().message());
      metrics_.counter("meshnode_agent_host_rules_restored_total", "Times the host probe SNAT rules were found missing and re-applied.").inc();
      if (auto synced = host_rules_->sync(ips); !synced) spdlog::error("host probe rules: {}", synced.error().message());
    }
  }
}

bool Agent::reconciled() const { return kube_ == nullptr || kube_->idle(); }

bool Agent::ready() const { return events_ != nullptr && zds_ != nullptr; }

std::size_t Agent::enrolled_pods() const {
  std::lock_guard lock(mutex_);
  return pods_.size();
}

std::size_t Agent::proxy_connections() const { return zds_ ? zds_->connections() : 0; }

void Agent::count(const std::string& event, int status) {
  metrics_
      .counter("istio_cni_plugin_requests_total", "CNI plugin events handled, by event and response code.",
               {{"event", event}, {"response_code", std::to_string(status)}})
      .inc();
}

EventResponse Agent::handle(const EventRequest& request) {
  static const std::map<std::string, nodeapi::EventKind, std::less<>> kRoutes = {
      {"/cmdadd", nodeapi::EventKind::kAdd}, {"/cmddel", nodeapi::EventKind::kDel}, {"/cmdcheck", nodeapi::EventKind::kCheck}};
  const auto route = kRoutes.find(request.path);
  const std::string name = route == kRoutes.end() ? "unknown" : request.path.substr(1);
  EventResponse response;
  if (route == kRoutes.end()) {
    response = error_response(404, "unknown path " + request.path + " (known: /cmdadd /cmddel /cmdcheck)");
  } else if (request.method != "POST") {
    response = error_response(405, "use POST");
  } else if (auto event = nodeapi::parse_plugin_event(request.body, route->second); !event) {
    response = error_response(400, event.error().context);
  } else {
    std::lock_guard lock(ops_mutex_);
    if (route->second == nodeapi::EventKind::kAdd) {
      response = kube_ ? handle_kube_add(*event) : handle_add(*event);
    } else if (route->second == nodeapi::EventKind::kDel) {
      response = handle_del(*event);
    } else {
      response = kube_ ? handle_kube_check(*event) : handle_check(*event);
    }
  }
  count(name, response.status);
  spdlog::info("plugin event: {} status={} body={}", name, response.status, response.body.substr(0, response.body.size() - 1));
  return response;
}

Result<base::Netns> Agent::open_netns(const std::string& path) const {
  return base::Netns::open(options_.netns_root + path);
}

EventResponse Agent::handle_add(const nodeapi::PluginEvent& event) {
  const Enrollment decision = decide(options_.policy, event.pod_namespace, event.pod_name);
  if (!decision.enroll) return json_response(200, {{"enrolled", false}, {"reason", decision.reason}});
  auto opened = open_netns(event.netns);
  if (!opened) return error_response(500, "open netns: " + opened.error().message());
  auto netns = std::make_shared<const base::Netns>(std::move(*opened));
  const PodRecord record = record_of(event);
  if (auto refused = refuse_add(record, *netns)) return *refused;
  if (auto existing = find_pod(record.uid); existing && existing->netns && *existing->netns == *netns &&
                                            redirector_->check(*netns) && zds_->acked(record.uid)) {
    return json_response(200, {{"enrolled", true}});  // a repeated ADD of a healthy pod
  }
  if (auto enrolled = enroll(record, netns, /*need_ack=*/true); !enrolled) return error_response(500, enrolled.error().context);
  return json_response(200, {{"enrolled", true}});
}

base::Result<void> Agent::enroll(const PodRecord& record, std::shared_ptr<const base::Netns> netns, bool need_ack) {
  if (auto applied = redirector_->apply(*netns); !applied) {
    return base::fail(Errc::kIo, "redirection rules: " + applied.error().message());
  }
  if (auto saved = store_.save(record); !saved) return fail_add(record, *netns, "run dir: " + saved.error().message());
  // In the table before the Add so a proxy connecting meanwhile gets the pod in its snapshot.
  put_pod(Pod{record, netns});
  if (need_ack || zds_->connections() > 0) {
    if (auto added = zds_->add(record.uid, workload_info(record), *netns); !added) {
      return fail_add(record, *netns, "partial add error: " + added.error().context);
    }
  }
  spdlog::info("pod enrolled uid={} pod={}/{} netns={}", record.uid, record.namespace_, record.name, record.netns);
  sync_host_rules();
  if (kube_) kube_->set_redirection(record.namespace_, record.name, true);
  return {};
}

// The trust checks of an ADD, before anything is programmed; nullopt = go ahead.
std::optional<EventResponse> Agent::refuse_add(const PodRecord& record, const base::Netns& netns) const {
  std::vector<base::IpAddr> ips;
  for (const std::string& text : record.ips) {
    if (auto ip = base::IpAddr::parse(text)) ips.push_back(*ip);
  }
  std::string why;
  if (auto verified = verify_pod_netns(netns, agent_netns_, ips); !verified) {
    why = verified.error().context;
  } else if (auto existing = find_pod(record.uid); existing && existing->netns && !(*existing->netns == netns)) {
    why = "pod " + record.uid + " is already enrolled in netns " + existing->record.netns +
          "; a pod's sandbox does not move (DEL it first)";
  }
  if (why.empty()) return std::nullopt;
  spdlog::warn("plugin event: ADD refused uid={} pod={}/{} netns={} reason=\"{}\"", record.uid, record.namespace_,
               record.name, record.netns, why);
  metrics_
      .counter("meshnode_agent_plugin_events_refused_total",
               "Plugin events refused by a trust check (netns not the pod's, sandbox moved).", {{"event", "cmdadd"}})
      .inc();
  return error_response(403, why);
}

// Rolls an ADD back completely: no rules, no record, no proxy keeps the pod.
base::Result<void> Agent::fail_add(const PodRecord& record, const base::Netns& netns, const std::string& reason) {
  // Ignored: the pod may never have been recorded as enrolled; what matters is that it is not now.
  (void)take_pod(record.uid);
  if (zds_->connections() > 0) zds_->del(record.uid);
  if (auto erased = store_.erase(record.uid); !erased) spdlog::warn("run dir: {}", erased.error().message());
  if (auto removed = redirector_->remove(netns); !removed) {
    spdlog::error("rollback of pod {} left rules behind: {}", record.uid, removed.error().message());
  }
  spdlog::warn("pod not enrolled uid={} pod={}/{} reason=\"{}\"", record.uid, record.namespace_, record.name, reason);
  return base::fail(Errc::kIo, reason);
}

EventResponse Agent::handle_del(const nodeapi::PluginEvent& event) {
  const bool policy_enrolls = !kube_ && decide(options_.policy, event.pod_namespace, event.pod_name).enroll;
  const bool removed = release(event.pod_uid, "CNI DEL");
  // A proxy may hold the pod from an Add whose answer we never saw (agent restart mid-ADD).
  if (!removed && policy_enrolls) zds_->del(event.pod_uid);
  return json_response(200, {{"removed", removed}});
}

bool Agent::release(const std::string& uid, std::string_view why) {
  auto pod = take_pod(uid);
  // Rules first, then the proxy (as istio-cni does): new connections then go out plain instead of
  // into a capture port whose listener is about to close.
  if (pod && pod->netns) {
    // Only while the netns is still reachable by its path: our own fd would otherwise keep a dead
    // sandbox's netns alive just to clean it.
    auto current = open_netns(pod->record.netns);
    if (current && *current == *pod->netns) {
      if (auto removed = redirector_->remove(*pod->netns); !removed) {
        spdlog::warn("pod {}: removing rules failed: {}", uid, removed.error().message());
      }
    }
  }
  if (pod) zds_->del(uid);
  if (auto erased = store_.erase(uid); !erased) spdlog::warn("run dir: {}", erased.error().message());
  if (!pod) return false;
  sync_host_rules();
  spdlog::info("pod released uid={} pod={}/{} why=\"{}\"", uid, pod->record.namespace_, pod->record.name, why);
  if (kube_) kube_->set_redirection(pod->record.namespace_, pod->record.name, false);
  return true;
}

std::size_t Agent::release_all_pods() {
  std::vector<std::string> uids;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [uid, pod] : pods_) uids.push_back(uid);
  }
  std::lock_guard lock(ops_mutex_);
  for (const std::string& uid : uids) (void)release(uid, "uninstall");
  if (host_rules_) {
    std::lock_guard host(host_mutex_);
    if (auto removed = host_rules_->remove(); !removed) spdlog::warn("host probe rules: {}", removed.error().message());
  }
  spdlog::info("uninstall: released {} pods (rules removed, proxies told, records erased)", uids.size());
  return uids.size();
}

EventResponse Agent::handle_check(const nodeapi::PluginEvent& event) {
  auto pod = find_pod(event.pod_uid);
  if (!pod) {
    if (!decide(options_.policy, event.pod_namespace, event.pod_name).enroll) {
      return json_response(200, {{"enrolled", false}});
    }
    return error_response(500, "pod " + event.pod_uid + " should be enrolled but is not");
  }
  if (!pod->netns) return error_response(500, "netns of pod " + event.pod_uid + " is gone");
  if (auto checked = redirector_->check(*pod->netns); !checked) {
    return error_response(500, "redirection rules: " + checked.error().message());
  }
  if (!zds_->acked(event.pod_uid)) return error_response(500, "no connected proxy has acknowledged the pod");
  return json_response(200, {{"enrolled", true}});
}

void Agent::restore_pods() {
  std::vector<std::string> broken;
  for (PodRecord& record : store_.load_all(&broken)) {
    auto opened = open_netns(record.netns);
    std::vector<base::IpAddr> ips;
    for (const std::string& text : record.ips) {
      if (auto ip = base::IpAddr::parse(text)) ips.push_back(*ip);
    }
    auto verified = opened ? verify_pod_netns(*opened, agent_netns_, ips) : base::Result<void>(std::unexpected(opened.error()));
    if (!verified) {
      // Its DEL came while we were down (or the path now names another sandbox): forget the pod.
      spdlog::warn("restore: pod {} ({}/{}) dropped, its netns is gone: {}", record.uid, record.namespace_, record.name,
                   verified.error().message());
      if (auto erased = store_.erase(record.uid); !erased) spdlog::warn("run dir: {}", erased.error().message());
      continue;
    }
    auto netns = std::make_shared<const base::Netns>(std::move(*opened));
    // Check, don't re-apply: working rules of a running pod stay untouched.
    if (auto checked = redirector_->check(*netns); !checked) {
      spdlog::warn("restore: pod {} rules missing ({}), re-applying", record.uid, checked.error().message());
      if (auto applied = redirector_->apply(*netns); !applied) {
        spdlog::error("restore: pod {} rules cannot be applied: {}", record.uid, applied.error().message());
      }
    }
    put_pod(Pod{std::move(record), std::move(netns)});
  }
  for (const std::string& why : broken) spdlog::warn("restore: skipped record {}", why);
  spdlog::info("restore: {} pods from {}", enrolled_pods(), store_.dir());
}

std::vector<ZdsServer::SnapshotEntry> Agent::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<ZdsServer::SnapshotEntry> entries;
  for (const auto& [uid, pod] : pods_) entries.push_back({uid, workload_info(pod.record), pod.netns});
  return entries;
}

void Agent::put_pod(Pod pod) {
  std::lock_guard lock(mutex_);
  pods_.insert_or_assign(pod.record.uid, std::move(pod));
  enrolled_gauge_.set(static_cast<std::int64_t>(pods_.size()));
}

std::optional<Agent::Pod> Agent::take_pod(const std::string& uid) {
  std::lock_guard lock(mutex_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) return std::nullopt;
  Pod pod = std::move(it->second);
  pods_.erase(it);
  enrolled_gauge_.set(static_cast<std::int64_t>(pods_.size()));
  return pod;
}

std::optional<Agent::Pod> Agent::find_pod_by_key(const std::string& key) const {
  std::lock_guard lock(mutex_);
  for (const auto& [uid, pod] : pods_) {
    if (pod.record.namespace_ + "/" + pod.record.name == key) return pod;
  }
  return std::nullopt;
}

std::optional<Agent::Pod> Agent::find_pod(const std::string& uid) const {
  std::lock_guard lock(mutex_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

}  // namespace meshnode::agent
