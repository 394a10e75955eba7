#pragma once

#include <string_view>

#include "base/error.hpp"
#include "state/authorization.hpp"
#include "state/service.hpp"
#include "state/workload.hpp"

namespace istio::workload {
class Workload;
class Service;
}  // namespace istio::workload
namespace istio::security {
class Authorization;
}  // namespace istio::security

namespace meshnode::xds {

using base::Result;

/// xDS type URL of istio.workload.Address resources (research §2.3).
inline constexpr std::string_view kAddressType = "type.googleapis.com/istio.workload.Address";
/// xDS type URL of istio.security.Authorization resources (research §2.3).
inline constexpr std::string_view kAuthorizationType = "type.googleapis.com/istio.security.Authorization";

// Conversion from the wire model (proto/workload.proto, proto/authorization.proto) to meshnode's
// state model. Pure functions: no I/O, any thread. Each returns Errc::kConfig with a reason that
// names the offending field when the resource cannot be used; the xDS client then NACKs that one
// resource by name and applies the rest of its response.
//
// Unknown fields are ignored (the protobuf runtime keeps them aside). Unknown enum values (a newer
// istiod) follow one rule: where the value only describes or tunes (workload type, status, network
// mode, load-balancing scope/mode/health policy, IP families, visibility, app protocol) it falls
// back to the proto default; where guessing could weaken security or misroute traffic (tunnel
// protocol, authorization scope and action) the resource is rejected by name.

/// istio.workload.Workload → state::Workload (research §3.3).
/// Defaults: empty trust_domain → "cluster.local", service_account → "default", cluster_id →
/// "Kubernetes", absent capacity → 1; workload_type is lower-cased ("deployment", ...);
/// network_mode HOST_NETWORK drops the addresses (the reference never indexes host-network
/// workloads by IP); a port mapping with target_port 0 targets the service port.
/// Rejected (Errc::kConfig): empty uid; an address that is not 4 or 16 bytes; tunnel protocol
/// LEGACY_ISTIO_MTLS or unknown; a waypoint, network gateway or PROXY application tunnel (not
/// supported yet: dropping them would bypass the waypoint); a service key without "ns/hostname"
/// shape; a service port outside 1..65535 or target port above 65535.
[[nodiscard]] Result<state::Workload> to_workload(const istio::workload::Workload& in);
/// As above, interning the shared fields through `strings` (bulk conversion: one batch per
/// decode thread and response).
[[nodiscard]] Result<state::Workload> to_workload(const istio::workload::Workload& in,
                                                  state::InternedStringBatch& strings);

/// The fast path for the common Address resource: `address` is the Any payload (wire bytes of an
/// istio.workload.Address). When it returns true, `out` (a default Workload on entry) equals what
/// parsing the message and to_workload(address.workload()) give. It declines (false; `out` is
/// then unspecified) anything it does not convert exactly like that — a service, unknown or
/// unsupported fields, non-ASCII strings, a value to_workload() rejects, malformed bytes — and the
/// caller takes the protobuf path, which yields the result or error as usual.
[[nodiscard]] bool fast_workload_from_address(std::string_view address, state::InternedStringBatch& strings,
                                              state::Workload& out);

/// istio.workload.Service → state::Service (research §3.3).
/// Rejected (Errc::kConfig): empty namespace or hostname; a VIP that is not 4 or 16 bytes; a VIP
/// with a prefix length shorter than the address (CIDR VIPs are not supported yet); a waypoint or
/// weighted waypoints (not supported yet); a port outside 1..65535 (target 0..65535).
[[nodiscard]] Result<state::Service> to_service(const istio::workload::Service& in);

/// istio.security.Authorization → state::Authorization (research §3.3, anchors §D.2).
/// Rejected (Errc::kConfig): empty name or namespace; unknown scope or action; a string match with
/// no kind set; an IP that is not 4 or 16 bytes or a prefix length longer than the address; a port
/// outside 1..65535.
[[nodiscard]] Result<state::Authorization> to_authorization(const istio::security::Authorization& in);

}  // namespace meshnode::xds
