// Rendering of the in-pod redirection rules (research §6.3) as nft and iptables-restore text.
#include "agent/rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

namespace meshnode::agent {
namespace {

std::string prert_chain(const RedirectConfig& c) { return c.iptables_chain_prefix + "_PRERT"; }
std::string output_chain(const RedirectConfig& c) { return c.iptables_chain_prefix + "_OUTPUT"; }

std::string masked(std::uint32_t mark, std::uint32_t mask) { return hex(mark) + "/" + hex(mask); }

// The mangle part: connmark proxy-originated inbound connections (mark 0x539 seen in PREROUTING,
// i.e. the proxy connecting to the app over lo) with 0x111, and restore it on the app's replies so
// the fwmark rule routes them back to the proxy's transparent socket (M1, M2).
void nft_mangle_chains(std::string& out, const RedirectConfig& c) {
  const std::uint32_t keep = ~c.mark_mask;
  out += fmt::format(
      "  chain prerouting_mangle {{\n"
      "    type filter hook prerouting priority mangle; policy accept;\n"
      "    meta mark & {0} == {1} ct mark set ct mark & {2} | {3}\n"
      "  }}\n"
      "  chain output_mangle {{\n"
      "    type route hook output priority mangle; policy accept;\n"
      "    ct mark & {0} == {3} meta mark set ct mark\n"
      "  }}\n",
      hex(c.mark_mask), hex(c.proxy_mark), hex(keep), hex(c.tproxy_mark));
}

// Inbound (P1, I1): probes from the SNAT address and HBONE (15008) reach the pod untouched, the
// proxy's own connections (mark 0x539) too; every other TCP connection goes to 15006.
void nft_prerouting_nat(std::string& out, const RedirectConfig& c) {
  out += fmt::format(
      "  chain prerouting_nat {{\n"
      "    type nat hook prerouting priority dstnat; policy accept;\n"
      "    meta l4proto != tcp return\n"
      "    ip saddr {0} counter accept\n"
      "    ip6 saddr {1} counter accept\n"
      "    ip daddr 127.0.0.1 return\n"
      "    ip6 daddr ::1 return\n"
      "    tcp dport {2} return\n"
      "    meta mark & {3} == {4} return\n"
      "    meta l4proto tcp counter redirect to :{5}\n"
      "  }}\n",
      c.probe_snat_v4, c.probe_snat_v6, c.inbound_hbone_port, hex(c.mark_mask), hex(c.proxy_mark),
      c.inbound_plain_port);
}

// Outbound (P2, O1-O3): probe replies, replies of proxy-originated connections (0x111), traffic
// that stays in the pod (lo, loopback destinations) and the proxy's own sockets (0x539) are not
// captured; every other TCP connection goes to 15001.
void nft_output_nat(std::string& out, const RedirectConfig& c) {
  out += fmt::format(
      "  chain output_nat {{\n"
      "    type nat hook output priority -100; policy accept;\n"
      "    meta l4proto != tcp return\n"
      "    ip daddr {0} counter accept\n"
      "    ip6 daddr {1} counter accept\n"
      "    meta mark & {2} == {3} counter accept\n"
      "    oifname \"lo\" return\n"
      "    meta mark & {2} == {4} return\n"
      "    ip daddr 127.0.0.0/8 return\n"
      "    ip6 daddr ::1 return\n"
      "    meta l4proto tcp counter redirect to :{5}\n"
      "  }}\n",
      c.probe_snat_v4, c.probe_snat_v6, hex(c.mark_mask), hex(c.tproxy_mark), hex(c.proxy_mark),
      c.outbound_port);
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::string hex(std::uint32_t value) { return fmt::format("{:#x}", value); }

std::string render_nft(const RedirectConfig& config) {
  std::string out = fmt::format("add table inet {0}\ndelete table inet {0}\ntable inet {0} {{\n", config.nft_table);
  nft_mangle_chains(out, config);
  nft_prerouting_nat(out, config);
  nft_output_nat(out, config);
  out += "}\n";
  return out;
}

std::string render_nft_removal(const RedirectConfig& config) {
  return fmt::format("delete table inet {}\n", config.nft_table);
}

std::vector<std::string> nft_chain_names() {
  return {"prerouting_mangle", "output_mangle", "prerouting_nat", "output_nat"};
}

std::string render_iptables(const RedirectConfig& c, Family family) {
  const bool v4 = family == Family::kV4;
  const std::string snat = v4 ? c.probe_snat_v4 + "/32" : c.probe_snat_v6 + "/128";
  const std::string loopback = v4 ? "127.0.0.1/32" : "::1/128";
  const std::string pre = prert_chain(c);
  const std::string outc = output_chain(c);
  const std::string proxy = masked(c.proxy_mark, c.mark_mask);
  const std::string tproxy = masked(c.tproxy_mark, c.mark_mask);
  std::string out;
  out += fmt::format("*mangle\n:{0} - [0:0]\n:{1} - [0:0]\n-A PREROUTING -j {0}\n-A OUTPUT -j {1}\n", pre, outc);
  out += fmt::format("-A {} -m mark --mark {} -j CONNMARK --set-xmark {}\n", pre, proxy, tproxy);
  out += fmt::format(
      "-A {} -m connmark --mark {} -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff\n", outc,
      tproxy);
  out += "COMMIT\n";
  out += fmt::format("*nat\n:{0} - [0:0]\n:{1} - [0:0]\n-A PREROUTING -j {0}\n-A OUTPUT -j {1}\n", pre, outc);
  out += fmt::format("-A {} -s {} -p tcp -j ACCEPT\n", pre, snat);
  out += fmt::format("-A {} ! -d {} -p tcp ! --dport {} -m mark ! --mark {} -j REDIRECT --to-ports {}\n", pre,
                     loopback, c.inbound_hbone_port, proxy, c.inbound_plain_port);
  out += fmt::format("-A {} -d {} -p tcp -j ACCEPT\n", outc, snat);
  out += fmt::format("-A {} -p tcp -m mark --mark {} -j ACCEPT\n", outc, tproxy);
  out += fmt::format("-A {} ! -d {} -o lo -j ACCEPT\n", outc, loopback);
  out += fmt::format("-A {} ! -d {} -p tcp -m mark ! --mark {} -j REDIRECT --to-ports {}\n", outc, loopback,
                     proxy, c.outbound_port);
  out += "COMMIT\n";
  return out;
}

std::string render_iptables_removal(const RedirectConfig& c, std::string_view saved) {
  const std::vector<std::string> ours = {prert_chain(c), output_chain(c)};
  std::string out;
  std::string table;
  std::string jumps, chains;
  auto flush_table = [&] {
    if (!table.empty() && (!jumps.empty() || !chains.empty())) out += "*" + table + "\n" + jumps + chains + "COMMIT\n";
    jumps.clear();
    chains.clear();
  };
  for (const std::string& line : lines_of(saved)) {
    if (line.starts_with("*")) {
      flush_table();
      table = line.substr(1);
    } else if (line.starts_with("-A PREROUTING -j ") || line.starts_with("-A OUTPUT -j ")) {
      const std::string target = line.substr(line.rfind(' ') + 1);
      if (std::ranges::find(ours, target) != ours.end()) jumps += "-D" + line.substr(2) + "\n";
    } else if (line.starts_with(":")) {
      const std::string name = line.substr(1, line.find(' ') - 1);
      if (std::ranges::find(ours, name) != ours.end()) chains += "-F " + name + "\n-X " + name + "\n";
    } else if (line == "COMMIT") {
      flush_table();
      table.clear();
    }
  }
  flush_table();
  return out;
}

bool iptables_rules_present(const RedirectConfig& config, Family family, std::string_view saved) {
  // Compare per table the jump lines (verbatim) and the number of rules in each of our chains: the
  // saved form of a rule differs from what we render (iptables-save adds `-m tcp` and such).
  auto summarize = [&](std::string_view text) {
    std::vector<std::string> summary;
    std::string table;
    for (const std::string& line : lines_of(text)) {
      if (line.starts_with("*")) table = line;
      if (line.starts_with("-A PREROUTING -j " + config.iptables_chain_prefix) ||
          line.starts_with("-A OUTPUT -j " + config.iptables_chain_prefix)) {
        summary.push_back(table + line);
      } else if (line.starts_with("-A " + config.iptables_chain_prefix)) {
        summary.push_back(table + line.substr(0, line.find(' ', 3)));
      }
    }
    std::ranges::sort(summary);
    return summary;
  };
  return summarize(render_iptables(config, family)) == summarize(saved);
}

std::vector<std::vector<std::string>> render_route_add(const RedirectConfig& c, Family family) {
  const std::string f = family == Family::kV4 ? "-4" : "-6";
  const std::string any = family == Family::kV4 ? "0.0.0.0/0" : "::/0";
  return {
      {f, "rule", "add", "fwmark", masked(c.tproxy_mark, c.mark_mask), "pref", std::to_string(c.rule_priority),
       "lookup", std::to_string(c.route_table)},
      {f, "route", "replace", "local", any, "dev", "lo", "table", std::to_string(c.route_table)},
  };
}

std::vector<std::vector<std::string>> render_route_del(const RedirectConfig& c, Family family) {
  const std::string f = family == Family::kV4 ? "-4" : "-6";
  const std::string any = family == Family::kV4 ? "0.0.0.0/0" : "::/0";
  return {
      {f, "rule", "del", "fwmark", masked(c.tproxy_mark, c.mark_mask), "pref", std::to_string(c.rule_priority),
       "lookup", std::to_string(c.route_table)},
      {f, "route", "del", "local", any, "dev", "lo", "table", std::to_string(c.route_table)},
  };
}

bool route_rule_present(const RedirectConfig& c, std::string_view rule_show) {
  const std::string needle =
      fmt::format("fwmark {} lookup {}", masked(c.tproxy_mark, c.mark_mask), c.route_table);
  const std::string pref = std::to_string(c.rule_priority) + ":";
  for (const std::string& line : lines_of(rule_show)) {
    if (line.starts_with(pref) && line.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace meshnode::agent
