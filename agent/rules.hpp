#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshnode::agent {

/// Marks, ports and addresses of the in-pod redirection (Istio in-pod rules, research §6.3).
/// The defaults match meshnode-proxy: its in-pod sockets carry SO_MARK 0x539 and it listens on
/// 15001 (outbound capture), 15006 (inbound plaintext) and 15008 (inbound HBONE) in the pod netns.
struct RedirectConfig {
  std::uint32_t proxy_mark = 0x539;     ///< SO_MARK of the proxy's in-pod sockets (never captured)
  std::uint32_t tproxy_mark = 0x111;    ///< connmark/fwmark of proxy-originated inbound connections
  std::uint32_t mark_mask = 0xfff;      ///< mask for both marks
  std::uint32_t route_table = 100;      ///< policy-routing table: `local 0.0.0.0/0 dev lo`
  std::uint32_t rule_priority = 32764;  ///< `ip rule` preference of the fwmark rule
  std::uint16_t outbound_port = 15001;
  std::uint16_t inbound_plain_port = 15006;
  std::uint16_t inbound_hbone_port = 15008;
  std::string probe_snat_v4 = "169.254.7.127";  ///< kubelet probe SNAT source, never captured
  std::string probe_snat_v6 = "fd16:9254:7127:1337:ffff:ffff:ffff:ffff";
  std::string nft_table = "meshnode";         ///< `table inet <nft_table>`
  std::string iptables_chain_prefix = "MESHNODE";  ///< chains <prefix>_PRERT and <prefix>_OUTPUT
};

/// IP family of an iptables or policy-routing rendering.
enum class Family { kV4, kV6 };

/// The whole nftables ruleset of one pod as one libnftables transaction: `add table`, `delete
/// table`, then the full `table inet <name> { ... }` — so applying it twice yields the same
/// ruleset and a failure leaves the previous state untouched (nft batches are atomic).
/// Multi-line on purpose (nft 1.0.6 rejects some one-liners, env-probe §7). Pure.
[[nodiscard]] std::string render_nft(const RedirectConfig& config);

/// The nft command that removes our table (`delete table inet <name>`). Pure.
[[nodiscard]] std::string render_nft_removal(const RedirectConfig& config);

/// Chains every healthy table must contain, in rendering order (for `check`). Pure.
[[nodiscard]] std::vector<std::string> nft_chain_names();

/// iptables-restore input (used with --noflush) for one family: our chains in the mangle and nat
/// tables, the jumps from PREROUTING/OUTPUT and the rules of research §6.3 (without DNS capture and
/// virtual interfaces). v6 mirrors v4 with ::1/128 and the v6 probe SNAT address. Pure.
[[nodiscard]] std::string render_iptables(const RedirectConfig& config, Family family);

/// iptables-restore input (--noflush) that removes whatever of ours `saved` (iptables-save output
/// of the pod netns) still holds: `-D` for each jump, then `-F`/`-X` for each chain. Empty when
/// nothing of ours is present. Pure.
[[nodiscard]] std::string render_iptables_removal(const RedirectConfig& config, std::string_view saved);

/// True when `saved` (iptables-save output) holds every jump and exactly as many rules per chain
/// as `render_iptables` produces. Pure.
[[nodiscard]] bool iptables_rules_present(const RedirectConfig& config, Family family, std::string_view saved);

/// Arguments (after `ip`) of the policy-routing commands for `family`:
/// {"-4","rule","add","fwmark","0x111/0xfff","pref","32764","lookup","100"} and
/// {"-4","route","replace","local","0.0.0.0/0","dev","lo","table","100"}. Pure.
[[nodiscard]] std::vector<std::vector<std::string>> render_route_add(const RedirectConfig& config, Family family);

/// Arguments of the commands undoing `render_route_add` (rule del, route del). Pure.
[[nodiscard]] std::vector<std::vector<std::string>> render_route_del(const RedirectConfig& config, Family family);

/// True when `ip -4|-6 rule show` output holds our fwmark rule. Pure.
[[nodiscard]] bool route_rule_present(const RedirectConfig& config, std::string_view rule_show);

/// "0x539"-style lowercase hex. Pure.
[[nodiscard]] std::string hex(std::uint32_t value);

}  // namespace meshnode::agent
