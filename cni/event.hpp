#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.hpp"
#include "nodeapi/plugin_event.hpp"
#include "cni/request.hpp"
#include "cni/spec.hpp"

namespace meshnode::cni {

/// Reads `ips[]` of a prevResult (null prevResult → empty). Each entry needs `address` as
/// "ip/len"; `gateway` (IP text) and `interface` (integer ≥ 0) are optional. Code 7 naming
/// `prevResult.ips[i].<field>` otherwise. Pure.
[[nodiscard]] std::expected<std::vector<nodeapi::PodIp>, CniError> pod_ips(const nlohmann::ordered_json& prev_result,
                                                                  std::string_view cni_version);

/// The body POSTed to the agent's `/cmdadd`, `/cmddel` and `/cmdcheck`: `request` as a
/// nodeapi::PluginEvent (the one schema plugin and agent share), i.e. the reference
/// `CNIPluginAddEvent` encoding (Go's default JSON field names, research §2.5), first four fields
/// in the reference order, then our additions, which Go's decoder and ours ignore if unknown:
///
///   {"Netns":"/var/run/netns/x","PodName":"p","PodNamespace":"ns",
///    "IPs":[{"Interface":0,"Address":{"IP":"10.244.0.7","Mask":"////AA=="},"Gateway":"10.244.0.1"}],
///    "PodUID":"…","ContainerID":"…","IfName":"eth0"}
///
/// `Interface` is null when prevResult gives none; `Mask` is base64 of the 4-byte (IPv4) or 16-byte
/// (IPv6) netmask, as Go encodes `net.IPMask`; `Gateway` is null when absent (Go would write "" for
/// a nil `net.IP`; null decodes to the same nil in Go and is what meshnode-agent accepts);
/// `IPs` is [] when prevResult has none; `Netns` may be "" on DEL; `PodUID` "" when CNI_ARGS has no
/// K8S_POD_UID. Errors: those of pod_ips. Pure.
[[nodiscard]] std::expected<std::string, CniError> build_event_json(const Request& request);

}  // namespace meshnode::cni
