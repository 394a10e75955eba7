#include "cni/event.hpp"

#include <array>

namespace meshnode::cni {

namespace {

using OrderedJson = nlohmann::ordered_json;

std::unexpected<CniError> invalid(std::string_view version, std::string msg, std::string details = {}) {
  return std::unexpected(
      CniError{std::string(version), ErrorCode::kInvalidNetworkConfig, std::move(msg), std::move(details)});
}

std::string netmask_bytes(const PodIp& ip) {
  const std::size_t len = ip.address.is_v4() ? 4 : 16;
  std::string mask(len, '\0');
  for (std::size_t bit = 0; bit < ip.prefix_len && bit < len * 8; ++bit) {
    mask[bit / 8] = static_cast<char>(static_cast<unsigned char>(mask[bit / 8]) | (0x80u >> (bit % 8)));
  }
  return mask;
}

}  // namespace

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t n = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kAlphabet[n & 63] : '=');
  }
  return out;
}

std::expected<std::vector<PodIp>, CniError> pod_ips(const OrderedJson& prev_result, std::string_view v) {
  std::vector<PodIp> ips;
  if (prev_result.is_null()) return ips;
  auto list = prev_result.find("ips");
  if (list == prev_result.end() || list->is_null()) return ips;
  if (!list->is_array()) return invalid(v, "prevResult.ips: must be a list");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const auto& entry = (*list)[i];
    const std::string at = "prevResult.ips[" + std::to_string(i) + "]";
    if (!entry.is_object()) return invalid(v, at + ": must be an object");
    PodIp ip;
    auto address = entry.find("address");
    if (address == entry.end() || !address->is_string())
      return invalid(v, at + ".address: required CIDR string");
    const auto& text = address->get_ref<const std::string&>();
    auto net = base::IpNet::parse(text);
    if (!net || text.find('/') == std::string::npos) return invalid(v, at + ".address: not ip/len", text);
    ip.address = net->addr;
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
  OrderedJson body;
  body["Netns"] = request.netns;
  body["PodName"] = request.pod.name;
  body["PodNamespace"] = request.pod.ns;
  body["IPs"] = OrderedJson::array();
  for (const PodIp& ip : *ips) {
    OrderedJson entry;
    entry["Interface"] = ip.interface ? OrderedJson(*ip.interface) : OrderedJson(nullptr);
    entry["Address"]["IP"] = ip.address.to_string();
    entry["Address"]["Mask"] = base64(netmask_bytes(ip));
    entry["Gateway"] = ip.gateway ? OrderedJson(ip.gateway->to_string()) : OrderedJson(nullptr);
    body["IPs"].push_back(std::move(entry));
  }
  body["PodUID"] = request.pod.uid;
  body["ContainerID"] = request.container_id;
  body["IfName"] = request.ifname;
  return body.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace meshnode::cni
