#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"

namespace meshnode::agent {

/// One address of the pod from the chained prevResult (Go `IPConfig`).
struct PodIp {
  std::optional<int> interface;        ///< index into prevResult.interfaces; absent/null allowed
  base::IpAddr ip;                     ///< `Address.IP`
  std::optional<int> prefix_len;       ///< from `Address.Mask` (base64 netmask bytes) when present
  std::optional<base::IpAddr> gateway; ///< `Gateway` when present
};

/// Which endpoint a body was posted to: only ADD needs a netns (CNI DEL/CHECK may come without one).
enum class EventKind { kAdd, kDel, kCheck };

/// A CNI plugin event (research §2.5, Go struct `CNIPluginAddEvent`, default Go JSON names):
/// `{"Netns":"/var/run/netns/x","PodName":"p","PodNamespace":"ns","IPs":[{"Interface":0,
/// "Address":{"IP":"10.244.0.7","Mask":"////AA=="},"Gateway":"10.244.0.1"}]}`, plus two optional
/// meshnode fields the reference gets from Kubernetes instead: `PodUID` (K8S_POD_UID) and
/// `PodServiceAccount`. Unknown fields are ignored, as Go's decoder does.
struct PluginEvent {
  std::string netns;            ///< absolute path as the plugin saw it (CNI_NETNS); may be empty on DEL
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;          ///< `PodUID`, or "<namespace>/<name>" when absent
  std::string service_account;  ///< `PodServiceAccount`, or "default"
  std::vector<PodIp> ips;
};

/// Parses and validates a body. Rules: a JSON object; `PodName`, `PodNamespace` non-empty strings
/// of at most 253 printable characters without '/'; `Netns` an absolute path without ".." (required
/// for kAdd, optional otherwise); `IPs` absent, null or a list whose entries have `Address.IP` as an
/// IP literal, an optional base64 `Mask` of 4/16 bytes matching the IP's family and contiguous,
/// optional `Gateway` IP and integer-or-null `Interface`; `PodUID`/`PodServiceAccount` strings.
/// @returns Errc::kInvalidArgument "<field>: <what is wrong>" (e.g. "IPs[1].Address.IP: not an IP
///          address") — the field is named so the 400 tells the plugin what to fix. Pure.
[[nodiscard]] base::Result<PluginEvent> parse_plugin_event(std::string_view body, EventKind kind);

/// Decodes standard base64 (with '=' padding); nullopt on any other character or bad length. Pure.
[[nodiscard]] std::optional<std::string> decode_base64(std::string_view text);

}  // namespace meshnode::agent
