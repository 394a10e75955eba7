#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "base/netns.hpp"
#include "net/socket_factory.hpp"

namespace meshnode::fakes {

/// A net::SocketFactory for direct tests, which need no root: every "pod netns" is a stand-in
/// handle (a memfd) that is never entered, and every socket lives on loopback in the test's own
/// namespace. Each stand-in netns owns loopback IPs (e.g. 127.42.0.1, from the test):
/// - a listener asked for <any IP>:P in it binds <its first IP>:<ephemeral>, and the factory
///   remembers that port, so a dial to <that IP>:P (a peer's :15008, a pod's :15001) reaches it;
///   further listeners for the same (IP, P) share the port (SO_REUSEPORT, one per worker);
/// - an upstream socket from it is bound to its first IP (as a socket made in a pod netns carries
///   the pod IP), without SO_MARK or IP_TRANSPARENT (they need CAP_NET_ADMIN);
/// - the original destination of an accepted connection is what the test declared for the
///   client's address (`redirect`), else the local address (as without a conntrack entry).
/// Thread-safe.
class DirectSockets final : public net::SocketFactory {
 public:
  /// A stand-in netns named `name` whose interfaces have `ips` (first = the pod's source IP).
  [[nodiscard]] base::Result<std::shared_ptr<const base::Netns>> make_netns(const std::string& name,
                                                                            std::vector<base::IpAddr> ips);
  /// Connections from `client` were meant for `orig_dst` (what NAT would have recorded).
  void redirect(const base::SocketAddr& client, const base::SocketAddr& orig_dst);
  /// original_dst fails for connections from `client` (as SO_ORIGINAL_DST does without NAT).
  void no_original_dst(const base::SocketAddr& client);
  /// Where a listener asked for `addr` really listens (`addr` itself when none was asked for).
  [[nodiscard]] base::SocketAddr bound(const base::SocketAddr& addr) const;
  /// Makes every later listener in `netns` fail with EADDRINUSE (a port taken in the pod).
  void fail_listeners_in(const base::Netns& netns, bool fail);
  /// Listeners created so far (all kinds, all netns).
  [[nodiscard]] int listeners_created() const;

  base::Result<base::UniqueFd> listener(const base::Netns* netns, const base::SocketAddr& addr,
                                        const net::ListenOptions& options) override;
  base::Result<net::Dialable> upstream(const base::Netns* netns, const base::SocketAddr& destination,
                                       std::uint32_t mark, const base::IpAddr* transparent_source) override;
  base::Result<base::SocketAddr> original_dst(int fd) override;
  base::Result<std::vector<base::IpAddr>> interface_addresses(const base::Netns& netns) override;

 private:
  using Key = std::pair<dev_t, ino_t>;
  [[nodiscard]] static Key key_of(const base::Netns& netns) { return {netns.dev(), netns.ino()}; }
  [[nodiscard]] base::Result<base::IpAddr> source_ip(const base::Netns& netns) const;

  mutable std::mutex mu_;
  std::map<Key, std::vector<base::IpAddr>> ips_;
  std::map<Key, bool> failing_;
  std::map<base::SocketAddr, std::uint16_t> ports_;  ///< (pod IP, asked port) → bound port
  std::map<base::SocketAddr, base::SocketAddr> redirects_;
  std::set<base::SocketAddr> no_original_dst_;
  int listeners_ = 0;
};

}  // namespace meshnode::fakes
