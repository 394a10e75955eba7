// meshnode-agent core: plugin events → enrollment → rules → ZDS, with restart safety.
#include "agent/agent.hpp"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "telemetry/metrics.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::Result;
using nlohmann::json;

EventResponse json_response(int status, json body) { return {status, body.dump() + "\n", "application/json"}; }
EventResponse error_response(int status, const std::string& reason) {
  return json_response(status, {{"error", reason}});
}

PodRecord record_of(const nodeapi::PluginEvent& event) {
  PodRecord record{event.pod_uid, event.pod_name, event.pod_namespace, event.service_account, event.netns, {}};
  for (const nodeapi::PodIp& ip : event.ips) record.ips.push_back(ip.ip.to_string());
  return record;
}

}  // namespace

nodeapi::zds::WorkloadInfo workload_info(const PodRecord& record) {
  nodeapi::zds::WorkloadInfo info;
  info.set_name(record.name);
  info.set_namespace_(record.namespace_);
  info.set_service_account(record.service_account);
  return info;
}

Agent::Agent(AgentOptions options, telemetry::MetricsRegistry& metrics, PodStore store)
    : options_(std::move(options)),
      metrics_(metrics),
      enrolled_gauge_(metrics.gauge("meshnode_agent_enrolled_pods", "Pods enrolled by this node agent.")),
      store_(std::move(store)),
      redirector_(make_redirector(options_.backend, options_.redirect)) {}

Agent::~Agent() { stop(); }

Result<std::unique_ptr<Agent>> Agent::start(AgentOptions options, telemetry::MetricsRegistry& metrics) {
  auto store = PodStore::open(options.run_dir);
  if (!store) return std::unexpected(store.error());
  std::unique_ptr<Agent> agent(new Agent(std::move(options), metrics, std::move(*store)));
  agent->restore_pods();
  auto& connected = metrics.gauge("ztunnel_connected", "Node proxies connected over ZDS.");
  ZdsServer::Options zds_options{agent->options_.zds_socket, std::chrono::milliseconds(5000), agent->options_.ack_timeout};
  Agent* raw = agent.get();
  auto zds = ZdsServer::start(std::move(zds_options), [raw] { return raw->snapshot(); }, &connected);
  if (!zds) return std::unexpected(zds.error());
  agent->zds_ = std::move(*zds);
  auto events = EventServer::start(agent->options_.plugin_socket, [raw](const EventRequest& r) { return raw->handle(r); });
  if (!events) return std::unexpected(events.error());
  agent->events_ = std::move(*events);
  return agent;
}

void Agent::stop() {
  if (events_) events_->stop();
  if (zds_) zds_->stop();
}

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
  } else if (route->second == nodeapi::EventKind::kAdd) {
    response = handle_add(*event);
  } else if (route->second == nodeapi::EventKind::kDel) {
    response = handle_del(*event);
  } else {
    response = handle_check(*event);
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
  if (auto existing = find_pod(record.uid); existing && existing->netns && *existing->netns == *netns &&
                                            redirector_->check(*netns) && zds_->acked(record.uid)) {
    return json_response(200, {{"enrolled", true}});  // a repeated ADD of a healthy pod
  }
  if (auto applied = redirector_->apply(*netns); !applied) {
    return error_response(500, "redirection rules: " + applied.error().message());
  }
  if (auto saved = store_.save(record); !saved) return fail_add(record, *netns, "run dir: " + saved.error().message());
  // In the table before the Add so a proxy connecting meanwhile gets the pod in its snapshot.
  put_pod(Pod{record, netns});
  if (auto added = zds_->add(record.uid, workload_info(record), *netns); !added) {
    return fail_add(record, *netns, "partial add error: " + added.error().context);
  }
  spdlog::info("pod enrolled uid={} pod={}/{} netns={}", record.uid, record.namespace_, record.name, record.netns);
  return json_response(200, {{"enrolled", true}});
}

// Rolls an ADD back completely: no rules, no record, no proxy keeps the pod.
EventResponse Agent::fail_add(const PodRecord& record, const base::Netns& netns, const std::string& reason) {
  // Ignored: the pod may never have been recorded as enrolled; what matters is that it is not now.
  (void)take_pod(record.uid);
  if (zds_->connections() > 0) zds_->del(record.uid);
  if (auto erased = store_.erase(record.uid); !erased) spdlog::warn("run dir: {}", erased.error().message());
  if (auto removed = redirector_->remove(netns); !removed) {
    spdlog::error("rollback of pod {} left rules behind: {}", record.uid, removed.error().message());
  }
  spdlog::warn("pod not enrolled uid={} pod={}/{} reason=\"{}\"", record.uid, record.namespace_, record.name, reason);
  return error_response(500, reason);
}

EventResponse Agent::handle_del(const nodeapi::PluginEvent& event) {
  auto pod = take_pod(event.pod_uid);
  const bool policy_enrolls = decide(options_.policy, event.pod_namespace, event.pod_name).enroll;
  if (pod || policy_enrolls) zds_->del(event.pod_uid);
  if (pod && pod->netns) {
    // Only while the netns is still reachable by its path: our own fd would otherwise keep a dead
    // sandbox's netns alive just to clean it.
    auto current = open_netns(pod->record.netns);
    if (current && *current == *pod->netns) {
      if (auto removed = redirector_->remove(*pod->netns); !removed) {
        spdlog::warn("pod {}: removing rules failed: {}", event.pod_uid, removed.error().message());
      }
    }
  }
  if (auto erased = store_.erase(event.pod_uid); !erased) spdlog::warn("run dir: {}", erased.error().message());
  if (pod) spdlog::info("pod removed uid={} pod={}/{}", event.pod_uid, event.pod_namespace, event.pod_name);
  return json_response(200, {{"removed", pod.has_value()}});
}

std::size_t Agent::release_all_pods() {
  std::vector<std::string> uids;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [uid, pod] : pods_) uids.push_back(uid);
  }
  for (const std::string& uid : uids) {
    auto pod = find_pod(uid);
    if (!pod) continue;
    nodeapi::PluginEvent del;
    del.pod_uid = uid;
    del.pod_name = pod->record.name;
    del.pod_namespace = pod->record.namespace_;
    (void)handle_del(del);
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
    if (!opened) {
      spdlog::warn("restore: netns of pod {} not reachable ({}); it is kept without fd", record.uid,
                   opened.error().message());
      put_pod(Pod{std::move(record), nullptr});
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

std::optional<Agent::Pod> Agent::find_pod(const std::string& uid) const {
  std::lock_guard lock(mutex_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

}  // namespace meshnode::agent
