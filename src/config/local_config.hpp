#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "state/authorization.hpp"
#include "state/service.hpp"
#include "state/workload.hpp"

namespace meshnode::config {

using base::Result;

/// The content of a local config file (LOCAL_XDS_PATH): the same schema as the reference node
/// proxy's local config (research §3.3; camelCase keys, unknown keys rejected). Feed it to
/// state::StateSnapshot::build, which checks cross-object rules (duplicate uid, IP, VIP).
struct LocalConfig {
  /// In file order.
  std::vector<state::Workload> workloads;
  /// In file order.
  std::vector<state::Service> services;
  /// In file order.
  std::vector<state::Authorization> policies;
};

/// Parses local config YAML. An empty text or empty document gives an empty config.
/// Top-level keys: `workloads`, `services`, `policies` (each optional). Defaults applied: a missing
/// or empty serviceAccount → "default", trustDomain → "cluster.local", clusterId → "Kubernetes";
/// a missing uid → "<clusterId>//v1/Pod/<namespace>/<name>". A key whose value is null counts as
/// absent. Keys of the reference schema that change behaviour we do not implement yet (waypoint,
/// networkGateway, networkMode HostNetwork, applicationTunnel PROXY, service cidrVips /
/// weightedWaypoints / endpoints) are rejected rather than ignored.
/// @param source_name used as the file name in error messages.
/// @returns Errc::kConfig "<source_name>:<line>:<column>: <key path>: <what is wrong>" (1-based
///          positions; key path like `workloads[1].workloadIps[0]`, "(root)" for the document) on
///          malformed YAML, unknown or duplicate keys, wrong types, bad IPs/CIDRs, ports outside
///          1..65535, bad enum values, missing required keys. Never throws. Pure; any thread.
[[nodiscard]] Result<LocalConfig> parse_local_config(std::string_view yaml_text,
                                                     std::string_view source_name);

/// Reads `path` and parses it with parse_local_config (source name = the path as given).
/// @returns Errc::kIo (with errno) if the file cannot be read; parse errors as above. Blocking
/// file I/O: call at startup or from the control thread, never from a data worker.
[[nodiscard]] Result<LocalConfig> load_local_config(const std::filesystem::path& path);

}  // namespace meshnode::config
