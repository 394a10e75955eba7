#include "cni/event.hpp"

namespace meshnode::cni {

namespace {

using OrderedJson = nlohmann::ordered_json;

std::unexpected<CniError> invalid(std::string_view version, std::string msg, std::string details = {}) {
  return std::unexpected(
      CniError{std::string(version), ErrorCode::kInvalidNetworkConfig, std::move(msg), std::move(details)});
}

/// Where each event field comes from, for error messages that tell the runtime what to fix.
std::string source_of(std::string_view field) {
  if (field.starts_with("Netns")) return "CNI_NETNS";
  if (field.starts_with("PodNamespace")) return "CNI_ARGS K8S_POD_NAMESPACE (or defaultPodNamespace)";
  if (field.starts_with("PodName")) return "CNI_ARGS K8S_POD_NAME";
  if (field.starts_with("PodUID")) return "CNI_ARGS K8S_POD_UID";
  if (field.starts_with("ContainerID")) return "CNI_CONTAINERID";
  if (field.starts_with("IfName")) return "CNI_IFNAME";
  return "prevResult.ips";
}

nodeapi::EventKind kind_of(Command command) {
  if (command == Command::kAdd) return nodeapi::EventKind::kAdd;
  return command == Command::kDel ? nodeapi::EventKind::kDel : nodeapi::EventKind::kCheck;
}

/// The agent reads the body with the same schema (nodeapi::parse_plugin_event). What it would
/// refuse, or read as something else (JSON strings are UTF-8: other bytes arrive as U+FFFD), is
/// refused here with code 4 naming the variable, rather than as an agent 400 or a different pod.
std::expected<void, CniError> check_agent_reads(const Request& request, const nodeapi::PluginEvent& sent,
                                                const std::string& body) {
  const std::string& v = request.config.cni_version;
  auto read = nodeapi::parse_plugin_event(body, kind_of(request.command));
  if (!read) {
    const std::string& what = read.error().context;  // "<field>: <what is wrong>"
    return std::unexpected(CniError{v, ErrorCode::kInvalidEnvironment, source_of(what) + " (" + what + ")"});
  }
  const std::pair<const char*, bool> same[] = {
      {"Netns", read->netns == sent.netns},
      {"PodName", read->pod_name == sent.pod_name},
      {"PodNamespace", read->pod_namespace == sent.pod_namespace},
      {"PodUID", sent.pod_uid.empty() || read->pod_uid == sent.pod_uid},
      {"ContainerID", read->container_id == sent.container_id},
      {"IfName", read->ifname == sent.ifname},
  };
  for (const auto& [field, equal] : same) {
    if (!equal) return std::unexpected(CniError{v, ErrorCode::kInvalidEnvironment, source_of(field) + ": not valid UTF-8"});
  }
  return {};
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
  std::string body = nodeapi::encode_plugin_event(event);
  if (auto ok = check_agent_reads(request, event, body); !ok) return std::unexpected(ok.error());
  return body;
}

}  // namespace meshnode::cni
