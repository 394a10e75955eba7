// The two redirection backends: nftables through libnftables (default) and iptables through
// iptables-restore / ip6tables-restore child processes; both add the same policy routing.
#include "agent/redirect.hpp"

#include <memory>

#include "agent/exec.hpp"
#include "agent/nft.hpp"
#include "agent/policy_routing.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using base::Result;

class NftRedirector final : public Redirector {
 public:
  explicit NftRedirector(RedirectConfig config) : config_(std::move(config)) {}

  Result<void> apply(const base::Netns& netns) override {
    return run_in_netns(netns, [&]() -> Result<void> {
      auto loaded = nft_run(render_nft(config_));
      if (!loaded) return std::unexpected(loaded.error());
      // The nft batch is atomic: on failure nothing of it was committed.
      if (loaded->rc != 0) return fail(Errc::kIo, "nft load in " + netns.description() + ": " + trimmed(loaded->err));
      auto routed = add_policy_routing(config_);
      if (!routed) {
        // Best-effort rollback: the ADD fails with `routed`'s reason either way, and the agent's
        // fail-closed path removes the pod's rules again.
        (void)nft_run(render_nft_removal(config_));
        (void)remove_policy_routing(config_);
        return routed;
      }
      return {};
    });
  }

  Result<void> remove(const base::Netns& netns) override {
    return run_in_netns(netns, [&]() -> Result<void> {
      auto listed = nft_run("list table inet " + config_.nft_table);
      if (!listed) return std::unexpected(listed.error());
      if (listed->rc == 0) {
        auto deleted = nft_run(render_nft_removal(config_));
        if (!deleted) return std::unexpected(deleted.error());
        if (deleted->rc != 0) return fail(Errc::kIo, "nft delete table: " + trimmed(deleted->err));
      }
      return remove_policy_routing(config_);
    });
  }

  Result<void> check(const base::Netns& netns) override {
    return run_in_netns(netns, [&]() -> Result<void> {
      auto listed = nft_run("list table inet " + config_.nft_table);
      if (!listed) return std::unexpected(listed.error());
      if (listed->rc != 0) return fail(Errc::kNotFound, "nft table inet " + config_.nft_table + " missing");
      for (const std::string& chain : nft_chain_names()) {
        if (listed->out.find("chain " + chain + " {") == std::string::npos) {
          return fail(Errc::kNotFound, "nft chain " + chain + " missing");
        }
      }
      return check_policy_routing(config_);
    });
  }

 private:
  RedirectConfig config_;
};

const char* restore_tool(Family f) { return f == Family::kV4 ? "iptables-restore" : "ip6tables-restore"; }
const char* save_tool(Family f) { return f == Family::kV4 ? "iptables-save" : "ip6tables-save"; }

class IptablesRedirector final : public Redirector {
 public:
  explicit IptablesRedirector(RedirectConfig config) : config_(std::move(config)) {}

  Result<void> apply(const base::Netns& netns) override {
    return run_in_netns(netns, [&]() -> Result<void> {
      // Start from a clean slate so a second apply does not duplicate the jumps.
      if (auto cleared = remove_here(); !cleared) return cleared;
      for (Family family : {Family::kV4, Family::kV6}) {
        auto restored = run_checked({restore_tool(family), "--noflush", "-w"}, render_iptables(config_, family));
        if (!restored) {
          // Best-effort rollback: the apply fails with `restored`'s reason either way.
          (void)remove_here();
          return std::unexpected(restored.error());
        }
      }
      if (auto routed = add_policy_routing(config_); !routed) {
        // Best-effort rollback: the apply fails with `routed`'s reason either way.
        (void)remove_here();
        return routed;
      }
      return {};
    });
  }

  Result<void> remove(const base::Netns& netns) override {
    return run_in_netns(netns, [&] { return remove_here(); });
  }

  Result<void> check(const base::Netns& netns) override {
    return run_in_netns(netns, [&]() -> Result<void> {
      for (Family family : {Family::kV4, Family::kV6}) {
        auto saved = run_checked({save_tool(family)});
        if (!saved) return std::unexpected(saved.error());
        if (!iptables_rules_present(config_, family, saved->out)) {
          return fail(Errc::kNotFound, std::string(save_tool(family)) + ": redirection rules missing or incomplete");
        }
      }
      return check_policy_routing(config_);
    });
  }

 private:
  // Inside the netns: removes our jumps and chains as iptables-save shows them, then the routing.
  Result<void> remove_here() {
    for (Family family : {Family::kV4, Family::kV6}) {
      auto saved = run_checked({save_tool(family)});
      if (!saved) return std::unexpected(saved.error());
      const std::string removal = render_iptables_removal(config_, saved->out);
      if (removal.empty()) continue;
      auto removed = run_checked({restore_tool(family), "--noflush", "-w"}, removal);
      if (!removed) return std::unexpected(removed.error());
    }
    return remove_policy_routing(config_);
  }

  RedirectConfig config_;
};

}  // namespace

base::Result<RedirectBackend> parse_backend(std::string_view text) {
  if (text == "nftables") return RedirectBackend::kNftables;
  if (text == "iptables") return RedirectBackend::kIptables;
  return fail(Errc::kInvalidArgument, "redirect backend must be nftables or iptables, got '" + std::string(text) + "'");
}

std::unique_ptr<Redirector> make_redirector(RedirectBackend backend, RedirectConfig config) {
  if (backend == RedirectBackend::kIptables) return std::make_unique<IptablesRedirector>(std::move(config));
  return std::make_unique<NftRedirector>(std::move(config));
}

}  // namespace meshnode::agent
