#include "cni/event.hpp"

namespace meshnode::cni {

namespace {

using OrderedJson = nlohmann::ordered_json;

std::unexpected<CniError> invalid(std::string_view version, std::string msg, std::string details = {}) {
  return std::unexpected(
      CniError{std::string(version), ErrorCode::kInvalidNetworkConfig, std::move(msg), std::move(details)});
}

}  // namespace

std::expected<std::vector<nodeapi::PodIp>, CniError> pod_ips(const OrderedJson& prev_result, std::string_view v) {
  std::vector<nodeapi::PodIp> ips;
  if (prev_result.is_null()) return ips;
  auto list = prev_result.find("ips");
  if (list == prev_result.end() || list->is_null()) return ips;
  if (!list->is_array()) return invalid(v, "prevResult.ips: must be a list");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const auto& entry = (*list)[i];
    const std::string at = "prevResult.ips[" + std::to_string(i) + "]";
    if (!entry.is_object()) return invalid(v, at + ": must be an object");
    nodeapi::PodIp ip;
    auto address = entry.find("address");
    if (address == entry.end() || !address->is_string())
      return invalid(v, at + ".address: required CIDR string");
    const auto& text = address->get_ref<const std::string&>();
    auto net = base::IpNet::parse(text);
    if (!net || text.find('/') == std::string::npos) return invalid(v, at + ".address: not ip/len", text);
    ip.ip = net->addr;
    ip.prefix_len = net->prefix_len;
    if (auto gw = entry.find("gateway"); gw != entry.end() && !gw->is_null()) {
      auto parsed = gw->is_string()
                        ? base::IpAddr::parse(gw->get_ref<const std::string&>())
                        : base::Result<base::IpAddr>(base::fail(base::Errc::kInvalidArgument, ""));
      if (!parsed) return invalid(v, at + ".gateway: not an IP address", gw->dump());
      ip.gateway = *parsed;
    }
    if (auto itf = entry.find("interface"); itf != entry.end() && !itf->is_null()) {
      if (!itf->is_number_integer() || itf->get<long long>() < 0 || itf->get<long long>() > 1'000'000) {
        return invalid(v, at + ".interface: must be a non-negative integer", itf->dump());
      }
      ip.interface = itf->get<int>();
    }
    ips.push_back(ip);
  }
  return ips;
}

std::expected<std::string, CniError> build_event_json(const Request& request) {
  auto ips = pod_ips(request.config.prev_result, request.config.cni_version);
  if (!ips) return std::unexpected(ips.error());
  nodeapi::PluginEvent event;
  event.netns = request.netns;
  event.pod_name = request.pod.name;
  event.pod_namespace = request.pod.ns;
  event.ips = std::move(*ips);
  event.pod_uid = request.pod.uid;
  event.container_id = request.container_id;
  event.ifname = request.ifname;
  return nodeapi::encode_plugin_event(event);
}

}  // namespace meshnode::cni
