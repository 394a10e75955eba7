#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"

namespace meshnode::nodeapi {

/// The CNI plugin → node agent event contract (research §2.5, Go struct `CNIPluginAddEvent` with
/// Go's default JSON names), written by meshnode-cni and read by meshnode-agent. One schema for
/// both sides, so what the plugin sends is by construction what the agent accepts. Plain code: no
/// Asio, no protobuf, so the plugin links it.

/// One address of the pod from the chained prevResult (Go `IPConfig`).
struct PodIp {
  std::optional<int> interface;         ///< `Interface`: index into prevResult.interfaces; null allowed
  base::IpAddr ip;                      ///< `Address.IP` (the host address)
  std::optional<int> prefix_len;        ///< `Address.Mask` (base64 netmask bytes, Go `net.IPMask`)
  std::optional<base::IpAddr> gateway;  ///< `Gateway`; null when absent
  friend bool operator==(const PodIp&, const PodIp&) = default;
};

/// Which endpoint a body was posted to: only ADD needs a netns (CNI DEL/CHECK may come without one).
enum class EventKind { kAdd, kDel, kCheck };

/// One plugin event, e.g.
/// `{"Netns":"/var/run/netns/x","PodName":"p","PodNamespace":"ns","IPs":[{"Interface":0,
/// "Address":{"IP":"10.244.0.7","Mask":"////AA=="},"Gateway":"10.244.0.1"}],"PodUID":"…",
/// "ContainerID":"…","IfName":"eth0"}`. The first four fields are the reference's, in its order;
/// the rest are meshnode additions that Go's decoder (and ours) ignore when unknown. The agent
/// takes a pod's identity from the Kubernetes API, never from these fields (DESIGN §1 trust
/// boundaries): they name the pod, they do not vouch for it.
struct PluginEvent {
  std::string netns;            ///< `Netns`: CNI_NETNS as the plugin saw it; may be empty on DEL
  std::string pod_name;         ///< `PodName`
  std::string pod_namespace;    ///< `PodNamespace`
  std::vector<PodIp> ips;       ///< `IPs`: [] when prevResult has none
  std::string pod_uid;          ///< `PodUID` (K8S_POD_UID); parse: "<namespace>/<name>" when absent
  std::string service_account;  ///< `PodServiceAccount` (written only when set); parse: "default"
  std::string container_id;     ///< `ContainerID` (CNI_CONTAINERID)
  std::string ifname;           ///< `IfName` (CNI_IFNAME)
  friend bool operator==(const PluginEvent&, const PluginEvent&) = default;
};

/// The JSON body of `event`, compact, fields in the order above. `Interface` and `Gateway` are
/// null when absent (Go decodes null to the same nil it would write); `Mask` is omitted when
/// `prefix_len` is. Invalid UTF-8 in a string is replaced (U+FFFD), never thrown. Pure.
[[nodiscard]] std::string encode_plugin_event(const PluginEvent& event);

/// Parses and validates a body. Rules: a JSON object; `PodName`, `PodNamespace` non-empty strings
/// of at most 253 printable characters without '/'; `Netns` an absolute path without ".." (required
/// for kAdd, optional otherwise); `IPs` absent, null or a list whose entries have `Address.IP` as an
/// IP literal, an optional base64 `Mask` of 4/16 bytes matching the IP's family and contiguous,
/// optional `Gateway` IP and integer-or-null `Interface`; `PodUID`, `PodServiceAccount`,
/// `ContainerID`, `IfName` strings. Unknown fields are ignored, as Go's decoder does.
/// @returns Errc::kInvalidArgument "<field>: <what is wrong>" (e.g. "IPs[1].Address.IP: not an IP
///          address") — the field is named so the 400 tells the plugin what to fix. Pure.
[[nodiscard]] base::Result<PluginEvent> parse_plugin_event(std::string_view body, EventKind kind);

/// Standard base64 (RFC 4648 §4, with padding). Pure.
[[nodiscard]] std::string encode_base64(std::string_view bytes);

/// Decodes standard base64 (with '=' padding); nullopt on any other character, a bad length, or
/// non-zero bits under the padding (non-canonical, RFC 4648 §3.5). Pure.
[[nodiscard]] std::optional<std::string> decode_base64(std::string_view text);

}  // namespace meshnode::nodeapi
