#pragma once

#include <map>
#include <string>
#include <vector>

#include "http/http_message.hpp"

#include "state/snapshot.hpp"
#include "ca/certificate_manager.hpp"
#include "xds/client.hpp"

namespace meshnode::admin {

/// One enrolled pod as /config_dump shows it under `workloadState`.
struct EnrolledPod {
  std::string uid;
  std::string name;
  std::string ns;
  std::string service_account;
  std::string netns;
  std::string state;  ///< "Up" | "Pending"
};

/// The /config_dump JSON (research §5.2 shape, camelCase): workloads, services, policies,
/// workloadState (enrolled pods), certificates (identity, state, serial, validity, chain length,
/// refresh time, failures), xds (null without XDS_ADDRESS; else connected, per-type versions and
/// last ACK/NACK with its error). Pretty-printed.
[[nodiscard]] std::string config_dump_json(const state::StateSnapshot& snapshot, const std::vector<EnrolledPod>& pods,
                                           const std::vector<ca::CertificateStatus>& certificates,
                                           const xds::XdsStatus* xds = nullptr);

}  // namespace meshnode::admin

namespace meshnode::admin {

/// GET /debug/authz?src=<ip[:port]>&src_identity=<spiffe id>&dst=<ip:port>: the L4 authorization
/// decision the proxy would make for that connection now, as JSON: {"decision": "allow"|"deny",
/// "reason", "decidingPolicy", "dryRunDenies", "destinationWorkload", "policies": [{policy,
/// action, dryRun, applies, matched, detail}]}. `src_identity` absent = plaintext (15006).
/// 400 naming the bad parameter; 404 when no workload has the dst IP.
[[nodiscard]] http::HttpResponse debug_authz(const state::StateSnapshot& snapshot,
                                              const std::map<std::string, std::string>& query);

}  // namespace meshnode::admin
