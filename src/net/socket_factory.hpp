#pragma once

#include <cstdint>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "base/netns.hpp"
#include "base/unique_fd.hpp"
#include "net/socket.hpp"

namespace meshnode::net {

/// An unconnected socket and the address to connect it to.
struct Dialable {
  base::UniqueFd fd;
  base::SocketAddr address;
};

/// Where the data path gets its sockets and learns its addresses: the seam that lets the proxy's
/// and in-pod tests run without root ("direct" tests: sockets on loopback in the test's own
/// namespace, a netns handle that is never entered). Production uses InPodSockets. Every method
/// may be called from any thread; implementations are thread-safe.
class SocketFactory {
 public:
  virtual ~SocketFactory() = default;

  /// A non-blocking listener for `addr` inside `netns` (null = the caller's namespace).
  /// Errc::kIo naming the address and namespace.
  [[nodiscard]] virtual base::Result<base::UniqueFd> listener(const base::Netns* netns, const base::SocketAddr& addr,
                                                              const ListenOptions& options) = 0;
  /// An unconnected non-blocking socket that reaches `destination` from inside `netns`, with
  /// SO_MARK `mark` and, when `transparent_source` is given, bound to that address
  /// (IP_TRANSPARENT). The returned address is the one to connect to (`destination` in production).
  [[nodiscard]] virtual base::Result<Dialable> upstream(const base::Netns* netns, const base::SocketAddr& destination,
                                                        std::uint32_t mark,
                                                        const base::IpAddr* transparent_source) = 0;
  /// The destination a captured connection's client dialled (SO_ORIGINAL_DST in production).
  [[nodiscard]] virtual base::Result<base::SocketAddr> original_dst(int fd) = 0;
  /// The unicast addresses of `netns` (how a pod's IPs are learnt when nothing else says them).
  [[nodiscard]] virtual base::Result<std::vector<base::IpAddr>> interface_addresses(const base::Netns& netns) = 0;
};

/// The real factory: sockets created inside the pod's netns (make_listener, make_connect_socket),
/// SO_ORIGINAL_DST, getifaddrs in the netns. Stateless.
class InPodSockets final : public SocketFactory {
 public:
  base::Result<base::UniqueFd> listener(const base::Netns* netns, const base::SocketAddr& addr,
                                        const ListenOptions& options) override {
    return make_listener(netns, addr, options);
  }
  base::Result<Dialable> upstream(const base::Netns* netns, const base::SocketAddr& destination, std::uint32_t mark,
                                  const base::IpAddr* transparent_source) override {
    auto fd = make_connect_socket(netns, destination, mark, transparent_source);
    if (!fd) return std::unexpected(std::move(fd.error()));
    return Dialable{std::move(*fd), destination};
  }
  base::Result<base::SocketAddr> original_dst(int fd) override { return net::original_dst(fd); }
  base::Result<std::vector<base::IpAddr>> interface_addresses(const base::Netns& netns) override {
    return net::interface_addresses(netns);
  }
};

}  // namespace meshnode::net
