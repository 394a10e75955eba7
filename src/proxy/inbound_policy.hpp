#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/address_roles.hpp"
#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "proxy/pod_context.hpp"
#include "proxy/tcp_metrics.hpp"
#include "proxy/tracker.hpp"
#include "state/rbac.hpp"
#include "state/snapshot.hpp"

namespace meshnode::proxy {

/// What both inbound paths (HBONE and plaintext) decide the same way.

/// L4 authorization of an inbound connection from `source` (with the verified `identity` for
/// HBONE, none for plaintext) to `destination` (this pod's IP and target port), against the pod's
/// workload in `snapshot`. Logs dry-run verdicts with the connection `id`. Pure but for the log.
[[nodiscard]] state::AuthzDecision authorize_inbound(const PodContext& pod, const state::StateSnapshot& snapshot,
                                                     const base::ClientAddr& source,
                                                     const std::optional<base::SpiffeId>& identity,
                                                     const base::SocketAddr& destination, std::string_view id);

/// A tracker re-check that re-authorizes the connection on a new snapshot; when now denied it
/// records "closed: policy change" in `closed_by_policy` (which must outlive the tracking) and
/// logs it once.
[[nodiscard]] ConnectionTracker::Recheck recheck_inbound(const PodContext& pod, base::ClientAddr source,
                                                         std::optional<base::SpiffeId> identity,
                                                         base::SocketAddr destination, std::string id,
                                                         std::optional<base::Error>& closed_by_policy);

/// The destination labels of a connection to this pod, and the source labels when `peer` is a
/// known workload on the pod's network.
void label_inbound(const PodContext& pod, const state::StateSnapshot& snapshot, const base::IpAddr& peer,
                   TrafficLabels& labels);

}  // namespace meshnode::proxy
