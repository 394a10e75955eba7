#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/redirect.hpp"
#include "agent/rules.hpp"
#include "base/error.hpp"
#include "base/ip.hpp"

namespace meshnode::agent {

/// Kubelet health probes under a policy that rejects plaintext (Istio ambient, feature map §3.2):
/// on the node, TCP from the node itself (a local socket) to an enrolled pod's IP is SNATed to
/// `probe_snat_v4` / `probe_snat_v6`, which the in-pod rules accept without capture, so probes
/// reach the app directly. Programmed in the calling thread's netns (the agent runs in the node's).
/// - nftables: `table inet <nft_table>-host` with sets of pod IPs, an output chain marking the
///   node's own TCP to them (bit `probe_mark`) and a srcnat postrouting chain SNATing marked ones;
/// - iptables: nat chain `<prefix>_HOST_POSTRT` (jumped to from POSTROUTING) with one
///   `-d <ip> -p tcp -m owner --socket-exists -j SNAT` rule per pod IP, per family.
/// Blocking (netlink, child processes); one thread at a time.
class HostProbeRules {
 public:
  virtual ~HostProbeRules() = default;
  /// Replaces the host rules with ones for exactly `pod_ips` (atomic per family). Errc::kIo.
  [[nodiscard]] virtual base::Result<void> sync(const std::vector<base::IpAddr>& pod_ips) = 0;
  /// Errc::kNotFound naming what is missing when the rules for `pod_ips` are not all in place.
  [[nodiscard]] virtual base::Result<void> check(const std::vector<base::IpAddr>& pod_ips) = 0;
  /// Removes everything of ours from the host; none there is fine.
  [[nodiscard]] virtual base::Result<void> remove() = 0;
};

/// Bit of the packet mark the nft backend uses between its output and postrouting chains.
inline constexpr std::uint32_t kProbeMark = 0x00100000;

[[nodiscard]] std::unique_ptr<HostProbeRules> make_host_probe_rules(RedirectBackend backend, RedirectConfig config);

/// The nft batch `sync` loads (add table, delete table, full table). Pure.
[[nodiscard]] std::string render_host_nft(const RedirectConfig& config, const std::vector<base::IpAddr>& pod_ips);
/// The iptables-restore --noflush input for `family` (chain declared = flushed, then one rule per
/// IP of that family). Pure.
[[nodiscard]] std::string render_host_iptables(const RedirectConfig& config, Family family,
                                               const std::vector<base::IpAddr>& pod_ips);

}  // namespace meshnode::agent
