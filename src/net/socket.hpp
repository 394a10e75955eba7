#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "base/netns.hpp"
#include "base/unique_fd.hpp"

namespace meshnode::net {

/// SO_MARK carried by every socket the proxy opens towards an upstream, so the pod's redirection
/// rules let it through instead of capturing it again. Source: Istio in-pod rules (0x539 = 1337).
inline constexpr std::uint32_t kProxyMark = 0x539;

/// Options for a listening socket.
struct ListenOptions {
  bool reuse_port = true;   ///< SO_REUSEPORT: one socket per worker, and hand-over between processes
  bool transparent = false; ///< IP_TRANSPARENT (TPROXY-style capture); ignored if not permitted
  int backlog = 1024;
};

/// Creates a non-blocking, close-on-exec TCP listener bound to `addr`, inside `netns` when given
/// (the calling thread switches into it for the socket() call only). A wildcard IPv4 address
/// (0.0.0.0) binds dual-stack [::] when the namespace has IPv6, else 0.0.0.0.
/// Errc::kIo naming the address and namespace (e.g. EADDRINUSE when the port is taken).
[[nodiscard]] base::Result<base::UniqueFd> make_listener(const base::Netns* netns, const base::SocketAddr& addr,
                                                         const ListenOptions& options = {});

/// Creates a non-blocking, close-on-exec TCP socket of `addr`'s family inside `netns` (when given),
/// with SO_MARK `mark` (0 = none) and TCP_NODELAY. With `transparent_source`, the socket is
/// IP_TRANSPARENT and bound to that address (port chosen by the kernel), so the upstream sees the
/// original client as the source (needs the pod's policy routing for replies, research §6.3).
/// The caller connects it. Errc::kIo on failure.
[[nodiscard]] base::Result<base::UniqueFd> make_connect_socket(const base::Netns* netns, const base::SocketAddr& addr,
                                                               std::uint32_t mark,
                                                               const base::IpAddr* transparent_source = nullptr);

/// The destination the client originally dialled before NAT redirection: SO_ORIGINAL_DST (IPv4),
/// then IP6T_SO_ORIGINAL_DST; falls back to getsockname() (no conntrack entry, e.g. TPROXY).
[[nodiscard]] base::Result<base::SocketAddr> original_dst(int fd);

/// getsockname()/getpeername() as SocketAddr (IPv4-mapped IPv6 normalised to IPv4).
[[nodiscard]] base::Result<base::SocketAddr> local_addr(int fd);
[[nodiscard]] base::Result<base::SocketAddr> peer_addr(int fd);

/// The unicast addresses configured inside `netns` (loopback and IPv6 link-local excluded), in
/// interface order: how the proxy learns a pod's IPs when the control plane has not told it.
/// Errc::kIo when the namespace cannot be entered or listed.
[[nodiscard]] base::Result<std::vector<base::IpAddr>> interface_addresses(const base::Netns& netns);

/// Converts between SocketAddr and sockaddr_storage. `to_sockaddr` returns the length to pass to
/// bind/connect.
socklen_t to_sockaddr(const base::SocketAddr& addr, sockaddr_storage& out);
[[nodiscard]] base::Result<base::SocketAddr> from_sockaddr(const sockaddr_storage& ss);

}  // namespace meshnode::net
