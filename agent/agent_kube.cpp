// meshnode-agent with Kubernetes (issue 13): the CNI ADD asks the pod cache, and every pod change
// is reconciled on the KubeWatch queue thread.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/agent.hpp"
#include "agent/pod_netns.hpp"
#include "agent/responses.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::agent {
namespace {

std::vector<base::IpAddr> parse_ips(const std::vector<std::string>& texts) {
  std::vector<base::IpAddr> ips;
  for (const std::string& text : texts) {
    if (auto ip = base::IpAddr::parse(text)) ips.push_back(*ip);
  }
  return ips;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::ranges::sort(v);
  return v;
}

bool annotated(const kube::Pod& pod) {
  const std::string* value = pod.metadata.annotations.find(kube::kRedirectionAnnotation);
  return value != nullptr && *value == kube::kRedirectionEnabled;
}

}  // namespace

// Identity from the API object, never from the request: uid, name, namespace, service account.
std::optional<PodRecord> Agent::kube_record(const kube::Pod& pod, const std::string& netns, std::vector<std::string> ips) const {
  PodRecord record;
  record.uid = pod.metadata.uid;
  record.name = pod.metadata.name;
  record.namespace_ = pod.metadata.namespace_;
  record.service_account = pod.service_account_name.empty() ? "default" : pod.service_account_name;
  record.netns = netns;
  record.ips = std::move(ips);
  if (record.uid.empty()) return std::nullopt;
  return record;
}

base::Result<void> Agent::claim_ips(const kube::Pod& pod) {
  for (const std::string& ip : pod.pod_ips) {
    const auto others = kube_->pods().by_index(ip);
    if (auto conflict = kube::find_ip_conflict(pod, others)) {
      metrics_.counter("meshnode_agent_kube_ip_conflicts_total", "Pods refused because another live pod claims their IP.").inc();
      return base::fail(base::Errc::kPolicyDenied, "IP " + conflict->ip + " of pod " + kube::object_key(pod.metadata) +
                                                       " is also claimed by live pod " + conflict->other + " (uid " +
                                                       conflict->other_uid + "); refusing to enroll either claim");
    }
  }
  std::vector<std::pair<std::string, std::string>> stale;  // uid, key
  {
    std::lock_guard lock(mutex_);
    for (const auto& [uid, enrolled] : pods_) {
      if (uid == pod.metadata.uid) continue;
      const bool shares = std::ranges::any_of(enrolled.record.ips, [&](const std::string& ip) {
        return std::ranges::find(pod.pod_ips, ip) != pod.pod_ips.end();
      });
      if (shares) stale.emplace_back(uid, enrolled.record.namespace_ + "/" + enrolled.record.name);
    }
  }
  for (const auto& [uid, key] : stale) {
    auto cached = kube_->pods().get(key);
    if (cached && cached->metadata.uid == uid && kube::is_live(*cached)) {
      return base::fail(base::Errc::kPolicyDenied, "an IP of pod " + kube::object_key(pod.metadata) +
                                                       " is held by enrolled live pod " + key + " (uid " + uid + ")");
    }
    (void)release(uid, "its IP is reused by pod " + kube::object_key(pod.metadata));
  }
  return {};
}

EventResponse Agent::handle_kube_add(const nodeapi::PluginEvent& event) {
  const KubeOptions& o = kube_->options();
  const std::string key = event.pod_namespace + "/" + event.pod_name;
  // nodeapi fills "<namespace>/<name>" when the runtime sent no K8S_POD_UID.
  const bool has_uid = !event.pod_uid.empty() && event.pod_uid != key;
  auto pod = kube_->pods().wait_for(key, o.add_wait, [&](const kube::Pod& p) { return !has_uid || p.metadata.uid == event.pod_uid; });
  auto ns = kube_->namespaces().get(event.pod_namespace);
  if (!pod) {
    const std::string* mode = ns ? ns->metadata.labels.find(kube::kDataplaneModeLabel) : nullptr;
    if (!ns || (mode != nullptr && *mode == kube::kDataplaneModeAmbient)) {
      return error_response(500, "pod " + key + (has_uid ? " uid " + event.pod_uid : "") + " is not in the API cache after " +
                                     std::to_string(o.add_wait.count()) + " ms and its namespace is " +
                                     (ns ? "ambient" : "unknown") + ": failing closed (the kubelet retries)");
    }
    return json_response(200, {{"enrolled", false}, {"reason", "pod not in the API cache; namespace not ambient"}});
  }
  auto existing = find_pod(pod->metadata.uid);
  const auto decision = kube::decide_enrollment(*pod, ns.get(), o.enrollment, existing.has_value());
  if (decision.reason == kube::EnrollmentReason::kNamespaceUnknown) {
    return error_response(500, "namespace " + event.pod_namespace + " of pod " + key + " is not in the API cache yet");
  }
  if (!decision.enroll) return json_response(200, {{"enrolled", false}, {"reason", std::string(kube::to_string(decision.reason))}});
  // At ADD time the API has no pod IPs yet (the kubelet writes them after the sandbox exists): the
  // plugin's prevResult IPs are used, and verified in the netns like any other claim.
  std::vector<std::string> ips = pod->pod_ips;
  if (ips.empty()) {
    for (const nodeapi::PodIp& ip : event.ips) ips.push_back(ip.ip.to_string());
  }
  auto record = kube_record(*pod, event.netns, ips);
  if (!record) return error_response(500, "pod " + key + " has no uid in the API");
  auto opened = open_netns(event.netns);
  if (!opened) return error_response(500, "open netns: " + opened.error().message());
  auto netns = std::make_shared<const base::Netns>(std::move(*opened));
  if (auto refused = refuse_add(*record, *netns)) return *refused;
  kube::Pod claim = *pod;
  claim.pod_ips = ips;
  if (auto claimed = claim_ips(claim); !claimed) {
    spdlog::error("plugin event: ADD refused pod={} reason=\"{}\"", key, claimed.error().context);
    return error_response(409, claimed.error().context);
  }
  if (existing && existing->netns && *existing->netns == *netns && redirector_->check(*netns) && zds_->acked(record->uid)) {
    return json_response(200, {{"enrolled", true}});  // a repeated ADD of a healthy pod
  }
  if (auto enrolled = enroll(*record, netns, /*need_ack=*/true); !enrolled) return error_response(500, enrolled.error().context);
  return json_response(200, {{"enrolled", true}});
}

EventResponse Agent::handle_kube_check(const nodeapi::PluginEvent& event) {
  const std::string key = event.pod_namespace + "/" + event.pod_name;
  if (auto enrolled = find_pod_by_key(key)) {
    nodeapi::PluginEvent by_uid = event;
    by_uid.pod_uid = enrolled->record.uid;
    return handle_check(by_uid);
  }
  auto pod = kube_->pods().get(key);
  auto ns = pod ? kube_->namespaces().get(pod->metadata.namespace_) : nullptr;
  if (pod && kube::decide_enrollment(*pod, ns.get(), kube_->options().enrollment).enroll) {
    return error_response(500, "pod " + key + " should be enrolled but is not");
  }
  return json_response(200, {{"enrolled", false}});
}

void Agent::reconcile(const std::string& key) {
  std::lock_guard lock(ops_mutex_);
  auto pod = kube_->pods().get(key);
  auto enrolled = find_pod_by_key(key);
  if (enrolled && (!pod || pod->metadata.uid != enrolled->record.uid)) {
    (void)release(enrolled->record.uid, pod ? "the pod was recreated" : "the pod was deleted");
    enrolled.reset();
  }
  if (!pod) return;
  auto ns = kube_->namespaces().get(pod->metadata.namespace_);
  const auto decision = kube::decide_enrollment(*pod, ns.get(), kube_->options().enrollment, enrolled.has_value());
  if (!decision.enroll) {
    if (enrolled) {
      (void)release(enrolled->record.uid, kube::to_string(decision.reason));
    } else if (annotated(*pod) && kube::is_live(*pod)) {
      kube_->set_redirection(pod->metadata.namespace_, pod->metadata.name, false);  // left by an earlier run
    }
    return;
  }
  if (enrolled) {
    if (pod->pod_ips.empty() || sorted(pod->pod_ips) == sorted(enrolled->record.ips)) {
      // Enrolled and intact (restore checked its rules): nothing to touch but a missing annotation.
      if (!annotated(*pod)) kube_->set_redirection(pod->metadata.namespace_, pod->metadata.name, true);
      return;
    }
    // The API's IPs are not the ones the ADD claimed: the enrollment was for another netns.
    (void)release(enrolled->record.uid, "its status IPs differ from the IPs it was enrolled with");
  }
  if (pod->pod_ips.empty()) {
    spdlog::debug("kube: pod {} should be enrolled; waiting for its IPs", key);
    return;
  }
  if (auto claimed = claim_ips(*pod); !claimed) {
    spdlog::error("kube: pod {} not enrolled: {}", key, claimed.error().context);
    return;
  }
  auto path = find_pod_netns(kube_->options().proc_root, agent_netns_, parse_ips(pod->pod_ips));
  if (!path) {
    spdlog::warn("kube: pod {} should be enrolled but its netns was not found: {}", key, path.error().message());
    return;
  }
  auto opened = base::Netns::open(*path);
  if (!opened) {
    spdlog::warn("kube: pod {}: {}", key, opened.error().message());
    return;
  }
  auto netns = std::make_shared<const base::Netns>(std::move(*opened));
  // The record's path must reopen the same netns through open_netns (which adds netns_root).
  std::string recorded = *path;
  if (!options_.netns_root.empty() && recorded.starts_with(options_.netns_root)) recorded.erase(0, options_.netns_root.size());
  auto record = kube_record(*pod, recorded, pod->pod_ips);
  if (!record) return;
  if (auto refused = refuse_add(*record, *netns)) return;
  if (auto done = enroll(*record, netns, /*need_ack=*/false); !done) {
    spdlog::error("kube: pod {} not enrolled: {}", key, done.error().context);
    return;
  }
  spdlog::info("kube: pod {} enrolled live reason=\"{}\" netns={}", key, kube::to_string(decision.reason), *path);
}

}  // namespace meshnode::agent
