#pragma once

#include "agent/rules.hpp"
#include "base/error.hpp"

namespace meshnode::agent {

/// Policy routing of proxy-originated connections (research §6.3): `ip rule fwmark 0x111/0xfff
/// lookup 100` + `local 0.0.0.0/0 dev lo table 100`, and the v6 pair when the netns' lo has IPv6.
/// All three run in the *calling thread's* netns (call them inside `Netns::run_in`); blocking.

/// Installs rule and route for each family; idempotent (the rule is added only when absent).
/// Errc::kIo with the `ip` stderr of the failed step.
[[nodiscard]] base::Result<void> add_policy_routing(const RedirectConfig& config);

/// Removes rule(s) and route for each family; absent pieces are fine.
[[nodiscard]] base::Result<void> remove_policy_routing(const RedirectConfig& config);

/// Errc::kNotFound when the v4 (or, with IPv6 on lo, the v6) rule is missing.
[[nodiscard]] base::Result<void> check_policy_routing(const RedirectConfig& config);

}  // namespace meshnode::agent
