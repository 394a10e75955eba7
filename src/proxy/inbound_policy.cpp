#include "proxy/inbound_policy.hpp"

#include <spdlog/spdlog.h>

#include "proxy/connection_log.hpp"

namespace meshnode::proxy {

state::AuthzDecision authorize_inbound(const PodContext& pod, const state::StateSnapshot& snapshot,
                                       const base::ClientAddr& source, const std::optional<base::SpiffeId>& identity,
                                       const base::SocketAddr& destination, std::string_view id) {
  auto local = pod.local_workload(snapshot);
  auto decision = state::authorize(snapshot, {source, identity, destination, local.get()});
  // Dry-run policies never change the outcome; they only say what they would have done.
  for (const auto& key : decision.dry_run_denies) {
    spdlog::info("authz\tdry-run\tid={} policy={} would deny src.addr={} dst.addr={}", id, key, source.to_string(),
                 destination.to_string());
  }
  if (decision.dry_run_allow_would_deny) {
    spdlog::info("authz\tdry-run\tid={} dry-run allow policies would deny src.addr={} dst.addr={}", id,
                 source.to_string(), destination.to_string());
  }
  return decision;
}

ConnectionTracker::Recheck recheck_inbound(const PodContext& pod, base::ClientAddr source,
                                           std::optional<base::SpiffeId> identity, base::SocketAddr destination,
                                           std::string id, std::optional<base::Error>& closed_by_policy) {
  return [&pod, source, identity = std::move(identity), destination, id = std::move(id),
          &closed_by_policy](const state::StateSnapshot& snapshot) -> std::optional<std::string> {
    auto decision = authorize_inbound(pod, snapshot, source, identity, destination, id);
    if (decision.allowed) return std::nullopt;
    closed_by_policy = base::Error{base::Errc::kPolicyDenied, "closed: policy change: " + decision.reason};
    spdlog::info("authz\tclosed: policy change\tid={} src.addr={} dst.addr={} reason=\"{}\"", id, source.to_string(),
                 destination.to_string(), decision.reason);
    return decision.reason;
  };
}

void label_inbound(const PodContext& pod, const state::StateSnapshot& snapshot, const base::IpAddr& peer,
                   TrafficLabels& labels) {
  auto local = pod.local_workload(snapshot);
  set_destination(labels, *local);
  if (auto src = snapshot.workload_by_address(local->network, peer)) set_source(labels, *src);
}

}  // namespace meshnode::proxy
