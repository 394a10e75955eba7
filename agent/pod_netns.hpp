#pragma once

#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "base/netns.hpp"

namespace meshnode::agent {

/// The checks a netns must pass before anything is programmed in it for a pod (issue 13 trust
/// boundary): it is a network namespace file (fstatfs NSFS magic, so not a regular file, a
/// directory or some other namespace type), it is not `agent_netns` (the agent's own), and it
/// holds every address of `pod_ips` (at least one is required). Errc::kPolicyDenied naming the
/// failed check; Errc::kIo when the netns cannot be inspected.
[[nodiscard]] base::Result<void> verify_pod_netns(const base::Netns& netns, const base::Netns& agent_netns,
                                                  const std::vector<base::IpAddr>& pod_ips);

/// Finds the netns of a running pod as the reference does (feature map §3.2): the processes under
/// `proc_root` (normally "/proc") whose netns holds every address of `pod_ips`, skipping
/// `agent_netns` and visiting each namespace once (by inode). The process with the lowest pid
/// wins (the sandbox's pause process is its oldest). @returns "<proc_root>/<pid>/ns/net";
/// Errc::kNotFound when no netns holds the IPs (the sandbox is gone or not up yet);
/// Errc::kInvalidArgument for empty `pod_ips`. Blocking: enters every candidate netns.
[[nodiscard]] base::Result<std::string> find_pod_netns(const std::string& proc_root, const base::Netns& agent_netns,
                                                      const std::vector<base::IpAddr>& pod_ips);

}  // namespace meshnode::agent
