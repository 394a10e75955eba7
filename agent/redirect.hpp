#pragma once

#include <memory>
#include <string_view>

#include "agent/rules.hpp"
#include "base/error.hpp"
#include "base/netns.hpp"

namespace meshnode::agent {

/// Which tool programs the in-pod rules (`--redirect=nftables|iptables`).
enum class RedirectBackend { kNftables, kIptables };

/// Parses "nftables" / "iptables". Errc::kInvalidArgument otherwise.
[[nodiscard]] base::Result<RedirectBackend> parse_backend(std::string_view text);

/// Programs the in-pod redirection of research §6.3 (rules of `rules.hpp` + policy routing) inside a
/// pod's network namespace. Every call switches the calling thread into the netns with
/// `Netns::run_in` and back; blocking (netlink, child processes); any thread, one call per netns at
/// a time.
class Redirector {
 public:
  virtual ~Redirector() = default;

  /// Installs the rules; idempotent (applying twice leaves the same ruleset). A failure half-way
  /// removes what was installed, so the pod is left with no rules of ours.
  /// @returns Errc::kIo naming the failed step (nft error text, iptables-restore stderr, ip stderr).
  [[nodiscard]] virtual base::Result<void> apply(const base::Netns& netns) = 0;

  /// Removes every rule, chain, table, ip rule and route of ours; no error when nothing is there.
  /// @returns Errc::kIo when something of ours could not be removed.
  [[nodiscard]] virtual base::Result<void> remove(const base::Netns& netns) = 0;

  /// Checks that the rules are in place without touching them.
  /// @returns Errc::kNotFound naming the first missing piece; Errc::kIo if listing failed.
  [[nodiscard]] virtual base::Result<void> check(const base::Netns& netns) = 0;
};

/// The redirector for `backend` with `config`.
[[nodiscard]] std::unique_ptr<Redirector> make_redirector(RedirectBackend backend, RedirectConfig config);

/// Runs `fn` (returning Result<T>) inside `netns`: the error of entering the netns or `fn`'s result.
template <class Fn>
[[nodiscard]] auto run_in_netns(const base::Netns& netns, Fn&& fn) -> decltype(fn()) {
  decltype(fn()) result = std::unexpected(base::Error{base::Errc::kInternal, "not run", {}});
  auto entered = netns.run_in([&] { result = fn(); });
  if (!entered) return std::unexpected(entered.error());
  return result;
}

}  // namespace meshnode::agent
