#pragma once

// Internal to meshnode::config: one parse function per object of the local config schema.

#include "config/yaml_reader.hpp"
#include "state/authorization.hpp"
#include "state/service.hpp"
#include "state/workload.hpp"

namespace meshnode::config::detail {

/// An item of `workloads` (research §3.3 LocalWorkload).
[[nodiscard]] Result<state::Workload> parse_workload(const Reader& r, const At& at);
/// An item of `services`.
[[nodiscard]] Result<state::Service> parse_service(const Reader& r, const At& at);
/// An item of `policies` (istio.security.Authorization in ztunnel's serde spelling).
[[nodiscard]] Result<state::Authorization> parse_policy(const Reader& r, const At& at);

}  // namespace meshnode::config::detail
