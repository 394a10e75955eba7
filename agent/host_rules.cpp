// Node-side SNAT of the node's own probe traffic to enrolled pods (issue 13).
#include "agent/host_rules.hpp"

#include <fmt/format.h>

#include "agent/exec.hpp"
#include "agent/nft.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using base::IpAddr;
using base::Result;

std::string table_of(const RedirectConfig& c) { return c.nft_table + "-host"; }
std::string chain_of(const RedirectConfig& c) { return c.iptables_chain_prefix + "_HOST_POSTRT"; }

std::string elements(const std::vector<IpAddr>& ips, bool v4) {
  std::string out;
  for (const IpAddr& ip : ips) {
    if (ip.is_v4() != v4) continue;
    out += (out.empty() ? "" : ", ") + ip.to_string();
  }
  return out;
}

class NftHostRules final : public HostProbeRules {
 public:
  explicit NftHostRules(RedirectConfig config) : config_(std::move(config)) {}

  Result<void> sync(const std::vector<IpAddr>& pod_ips) override {
    auto run = nft_run(render_host_nft(config_, pod_ips));
    if (!run) return std::unexpected(run.error());
    if (run->rc != 0) return fail(Errc::kIo, "nft load of the host probe rules: " + trimmed(run->err));
    return {};
  }

  Result<void> check(const std::vector<IpAddr>& pod_ips) override {
    auto run = nft_run("list table inet " + table_of(config_));
    if (!run) return std::unexpected(run.error());
    if (run->rc != 0) return fail(Errc::kNotFound, "table inet " + table_of(config_) + " is missing");
    for (const char* chain : {"chain output", "chain postrouting"}) {
      if (run->out.find(chain) == std::string::npos) return fail(Errc::kNotFound, std::string(chain) + " is missing");
    }
    for (const IpAddr& ip : pod_ips) {
      if (run->out.find(ip.to_string()) == std::string::npos) {
        return fail(Errc::kNotFound, "pod IP " + ip.to_string() + " is missing from the probe sets");
      }
    }
    return {};
  }

  Result<void> remove() override {
    auto run = nft_run("delete table inet " + table_of(config_));
    if (!run) return std::unexpected(run.error());
    return {};  // absent is fine
  }

 private:
  RedirectConfig config_;
};

const char* restore_tool(Family f) { return f == Family::kV4 ? "iptables-restore" : "ip6tables-restore"; }
const char* save_tool(Family f) { return f == Family::kV4 ? "iptables-save" : "ip6tables-save"; }
const char* iptables_tool(Family f) { return f == Family::kV4 ? "iptables" : "ip6tables"; }

class IptablesHostRules final : public HostProbeRules {
 public:
  explicit IptablesHostRules(RedirectConfig config) : config_(std::move(config)) {}

  Result<void> sync(const std::vector<IpAddr>& pod_ips) override {
    for (Family family : {Family::kV4, Family::kV6}) {
      auto restored = run_checked({restore_tool(family), "--noflush", "-w"}, render_host_iptables(config_, family, pod_ips));
      if (!restored) return std::unexpected(restored.error());
      auto present = run_program({iptables_tool(family), "-w", "-t", "nat", "-C", "POSTROUTING", "-j", chain_of(config_)});
      if (present && present->exit_code == 0) continue;
      auto added = run_checked({iptables_tool(family), "-w", "-t", "nat", "-A", "POSTROUTING", "-j", chain_of(config_)});
      if (!added) return std::unexpected(added.error());
    }
    return {};
  }

  Result<void> check(const std::vector<IpAddr>& pod_ips) override {
    for (Family family : {Family::kV4, Family::kV6}) {
      auto saved = run_checked({save_tool(family), "-t", "nat"});
      if (!saved) return std::unexpected(saved.error());
      if (saved->out.find("-A POSTROUTING -j " + chain_of(config_)) == std::string::npos) {
        return fail(Errc::kNotFound, std::string(save_tool(family)) + ": the jump to " + chain_of(config_) + " is missing");
      }
      for (const IpAddr& ip : pod_ips) {
        if ((family == Family::kV4) != ip.is_v4()) continue;
        if (saved->out.find("-A " + chain_of(config_) + " -d " + ip.to_string() + "/") == std::string::npos) {
          return fail(Errc::kNotFound, "the probe SNAT rule of pod IP " + ip.to_string() + " is missing");
        }
      }
    }
    return {};
  }

  Result<void> remove() override {
    for (Family family : {Family::kV4, Family::kV6}) {
      // Each step may find nothing to remove; that is fine.
      (void)run_program({iptables_tool(family), "-w", "-t", "nat", "-D", "POSTROUTING", "-j", chain_of(config_)});
      (void)run_program({iptables_tool(family), "-w", "-t", "nat", "-F", chain_of(config_)});
      (void)run_program({iptables_tool(family), "-w", "-t", "nat", "-X", chain_of(config_)});
    }
    return {};
  }

 private:
  RedirectConfig config_;
};

}  // namespace

std::string render_host_nft(const RedirectConfig& c, const std::vector<IpAddr>& pod_ips) {
  const std::string v4 = elements(pod_ips, true);
  const std::string v6 = elements(pod_ips, false);
  const std::string mark = hex(kProbeMark);
  return fmt::format(
      "add table inet {0}\n"
      "delete table inet {0}\n"
      "table inet {0} {{\n"
      "  set probe-pods-v4 {{\n    type ipv4_addr\n{1}  }}\n"
      "  set probe-pods-v6 {{\n    type ipv6_addr\n{2}  }}\n"
      "  chain output {{\n"
      "    type filter hook output priority mangle; policy accept;\n"
      "    meta l4proto tcp ip daddr @probe-pods-v4 meta mark set meta mark | {3}\n"
      "    meta l4proto tcp ip6 daddr @probe-pods-v6 meta mark set meta mark | {3}\n"
      "  }}\n"
      "  chain postrouting {{\n"
      "    type nat hook postrouting priority srcnat; policy accept;\n"
      "    meta mark & {3} == {3} ip daddr @probe-pods-v4 counter snat ip to {4}\n"
      "    meta mark & {3} == {3} ip6 daddr @probe-pods-v6 counter snat ip6 to {5}\n"
      "  }}\n"
      "}}\n",
      table_of(c), v4.empty() ? "" : "    elements = { " + v4 + " }\n", v6.empty() ? "" : "    elements = { " + v6 + " }\n",
      mark, c.probe_snat_v4, c.probe_snat_v6);
}

std::string render_host_iptables(const RedirectConfig& c, Family family, const std::vector<IpAddr>& pod_ips) {
  std::string out = "*nat\n:" + chain_of(c) + " - [0:0]\n";
  for (const IpAddr& ip : pod_ips) {
    if ((family == Family::kV4) != ip.is_v4()) continue;
    out += "-A " + chain_of(c) + " -d " + ip.to_string() + (ip.is_v4() ? "/32" : "/128") +
           " -p tcp -m owner --socket-exists -j SNAT --to-source " +
           (family == Family::kV4 ? c.probe_snat_v4 : c.probe_snat_v6) + "\n";
  }
  return out + "COMMIT\n";
}

std::unique_ptr<HostProbeRules> make_host_probe_rules(RedirectBackend backend, RedirectConfig config) {
  if (backend == RedirectBackend::kIptables) return std::make_unique<IptablesHostRules>(std::move(config));
  return std::make_unique<NftHostRules>(std::move(config));
}

}  // namespace meshnode::agent
