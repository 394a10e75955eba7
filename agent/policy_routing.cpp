// `ip rule` / `ip route` in the pod netns, through the ip binary (iproute2 is a runtime dependency).
#include "agent/policy_routing.hpp"

#include <fstream>

#include "agent/exec.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;

// The reference adds the v6 route only when lo has IPv6 (research §1.3); /proc/sys/net follows the
// calling thread's netns.
bool lo_has_ipv6() {
  std::ifstream in("/proc/sys/net/ipv6/conf/lo/disable_ipv6");
  int disabled = 1;
  return in && (in >> disabled) && disabled == 0;
}

std::vector<Family> families() {
  if (lo_has_ipv6()) return {Family::kV4, Family::kV6};
  return {Family::kV4};
}

std::vector<std::string> ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  return args;
}

base::Result<bool> rule_present(const RedirectConfig& config, Family family) {
  auto shown = run_checked({"ip", family == Family::kV4 ? "-4" : "-6", "rule", "show"});
  if (!shown) return std::unexpected(shown.error());
  return route_rule_present(config, shown->out);
}

}  // namespace

base::Result<void> add_policy_routing(const RedirectConfig& config) {
  for (Family family : families()) {
    auto commands = render_route_add(config, family);
    auto present = rule_present(config, family);
    if (!present) return std::unexpected(present.error());
    if (!*present) {
      if (auto added = run_checked(ip(commands[0])); !added) return std::unexpected(added.error());
    }
    if (auto routed = run_checked(ip(commands[1])); !routed) return std::unexpected(routed.error());
  }
  return {};
}

base::Result<void> remove_policy_routing(const RedirectConfig& config) {
  for (Family family : {Family::kV4, Family::kV6}) {
    auto commands = render_route_del(config, family);
    // Duplicates may exist if something else added the same rule: delete until none is left.
    for (int i = 0; i < 16; ++i) {
      auto present = rule_present(config, family);
      if (!present) {
        if (family == Family::kV6) break;  // no IPv6 in this netns at all
        return std::unexpected(present.error());
      }
      if (!*present) break;
      if (auto deleted = run_checked(ip(commands[0])); !deleted) return std::unexpected(deleted.error());
    }
    auto route = run_program(ip(commands[1]));
    if (!route) return std::unexpected(route.error());
    // "No such process"/"Cannot find device": the route is already gone, which is what we want.
  }
  return {};
}

base::Result<void> check_policy_routing(const RedirectConfig& config) {
  for (Family family : families()) {
    auto present = rule_present(config, family);
    if (!present) return std::unexpected(present.error());
    if (!*present) {
      return fail(Errc::kNotFound, std::string("policy routing rule missing (") +
                                       (family == Family::kV4 ? "ipv4" : "ipv6") + ")");
    }
  }
  return {};
}

}  // namespace meshnode::agent
