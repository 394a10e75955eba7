#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <string>

#include "base/ip.hpp"

namespace meshnode::base {

/// A socket address that carries its role in the connection, so a source and a destination cannot
/// be swapped at a call site (STYLE "Naming": addresses carry their role in the type). Thin: one
/// SocketAddr, built only explicitly, read through `addr` (or the ip/port/to_string shorthands).
template <class Role>
struct RoleAddr {
  SocketAddr addr;

  constexpr RoleAddr() = default;
  constexpr explicit RoleAddr(SocketAddr a) : addr(a) {}

  [[nodiscard]] const IpAddr& ip() const noexcept { return addr.ip; }
  [[nodiscard]] std::uint16_t port() const noexcept { return addr.port; }
  /// "a.b.c.d:port" / "[v6]:port".
  [[nodiscard]] std::string to_string() const { return addr.to_string(); }

  friend auto operator<=>(const RoleAddr&, const RoleAddr&) = default;
  friend bool operator==(const RoleAddr&, const RoleAddr&) = default;
};

/// The downstream client of a proxied connection: the TCP peer of a captured socket (the app), or
/// the TCP peer of an inbound HBONE connection (the client pod's IP: its proxy dials from there).
using ClientAddr = RoleAddr<struct ClientAddrRole>;
/// What the client dialled: SO_ORIGINAL_DST of a captured socket (a service VIP, a pod IP or an
/// address outside the mesh), or the target of a socks5 CONNECT.
using OrigDstAddr = RoleAddr<struct OrigDstAddrRole>;
/// The `:authority` of an HBONE CONNECT: the destination pod's IP and its target (app) port.
using HboneTarget = RoleAddr<struct HboneTargetRole>;
/// Where the proxy dials next: a peer's podIP:15008 (HBONE), a workload's podIP:port (plain TCP),
/// the original destination (passthrough), or the local app (inbound).
using NextHop = RoleAddr<struct NextHopRole>;

}  // namespace meshnode::base

template <class Role>
struct std::hash<meshnode::base::RoleAddr<Role>> {
  std::size_t operator()(const meshnode::base::RoleAddr<Role>& a) const noexcept {
    return std::hash<meshnode::base::SocketAddr>{}(a.addr);
  }
};
