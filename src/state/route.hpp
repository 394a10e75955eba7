#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "base/address_roles.hpp"
#include "base/ip.hpp"
#include "base/spiffe.hpp"
#include "state/snapshot.hpp"

namespace meshnode::state {

using base::Result;

/// Outbound capture listener port (REDIRECT target inside each pod netns). Research §1.2.
inline constexpr std::uint16_t kOutboundPort = 15001;
/// Inbound plaintext capture port.
inline constexpr std::uint16_t kInboundPlaintextPort = 15006;
/// Inbound HBONE (mTLS + HTTP/2 CONNECT) port; peers dial <podIP>:15008.
inline constexpr std::uint16_t kInboundHbonePort = 15008;
/// SOCKS5 outbound port (127.0.0.1 only, when enabled).
inline constexpr std::uint16_t kSocks5Port = 15080;

/// true for our own listener ports {15001, 15006, 15008, 15080}: a connection to one of them on
/// loopback would loop through the proxy ("attempted recursive call to ourselves", research §1.2).
[[nodiscard]] constexpr bool is_illegal_port(std::uint16_t port) noexcept {
  return port == kOutboundPort || port == kInboundPlaintextPort || port == kInboundHbonePort ||
         port == kSocks5Port;
}

/// Where and how an outbound connection goes. Decided once per connection by select_route.
struct Route {
  enum class Kind {
    kHbone,        ///< mTLS + HTTP/2 CONNECT to the destination's node proxy port 15008
    kTcp,          ///< plain TCP to the destination workload (tunnel protocol NONE)
    kPassthrough,  ///< plain TCP to the original destination (address unknown to the mesh)
  };
  Kind kind = Kind::kPassthrough;
  /// The address to connect to: podIP:15008 (kHbone), podIP:targetPort (kTcp), orig_dst
  /// (kPassthrough).
  base::NextHop next_hop;
  /// CONNECT :authority = podIP:targetPort. Only meaningful for kHbone (default-constructed
  /// otherwise).
  base::HboneTarget hbone_target;
  /// Identities the peer certificate may present: the destination workload's identity first, then
  /// the service's subjectAltNames that parse as SPIFFE ids (duplicates dropped). kHbone only;
  /// empty otherwise.
  std::vector<base::SpiffeId> expected_identities;
  /// The destination workload; null for kPassthrough.
  std::shared_ptr<const Workload> destination;
  /// The service whose VIP was dialled; null when addressed by pod IP or for kPassthrough.
  /// Points into the snapshot passed to select_route: valid while that snapshot lives.
  const Service* service = nullptr;
  /// kHbone to the destination's node proxy (ztunnel or meshnode): a peer that holds DATA
  /// arriving before its 200 until its upstream is connected and authorized, so what the app
  /// already sent may ride with the CONNECT. Not for Envoy hops (a native-tunnel workload's
  /// sidecar; waypoints, gateways): Envoy can be set to reject a CONNECT that sends data before
  /// its 2xx (reject_connect_request_early_data, envoy.reloadable_features.reject_early_connect_data).
  bool early_data = false;
};

/// Chooses the next hop for a connection captured on the outbound listener (research §4.1,
/// without waypoints, network gateways and DNS for now).
/// @param snapshot  the state to decide on; nothing else is read.
/// @param source    workload owning the pod netns the socket came from; its `network` scopes
///                  every address lookup and its `ns` the service visibility.
/// @param orig_dst  SO_ORIGINAL_DST of the captured socket (service VIP, pod IP or other).
/// @param lb_random a random number from the caller; the endpoint pick is a weighted choice by
///                  `capacity` among usable endpoints (sorted by uid), indexed by
///                  lb_random % total weight, so equal inputs give equal routes.
/// @returns the route; Errc::kRecursiveCall for loopback:{15001,15006,15008,15080};
///          Errc::kNotFound "port N is not a port of service <ns/hostname>" when a VIP is dialled
///          on a port its service does not declare; Errc::kNoHealthyUpstream naming the service
///          when a VIP has no usable endpoint for a declared port.
/// Pure and thread-safe.
[[nodiscard]] Result<Route> select_route(const StateSnapshot& snapshot, const Workload& source,
                                         base::OrigDstAddr orig_dst, std::uint64_t lb_random);

/// "hbone" / "tcp" / "passthrough" (logs, access log).
[[nodiscard]] std::string_view to_string(Route::Kind kind) noexcept;

}  // namespace meshnode::state
