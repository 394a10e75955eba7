// CNI plugin event bodies (research §2.5): one schema for meshnode-cni (writer) and
// meshnode-agent (reader).
#include "nodeapi/plugin_event.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>

namespace meshnode::nodeapi {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using nlohmann::json;

std::unexpected<base::Error> bad(const std::string& field, const std::string& what) {
  return fail(Errc::kInvalidArgument, field + ": " + what);
}

Result<std::string> optional_string(const json& body, const char* field) {
  if (!body.contains(field) || body[field].is_null()) return std::string();
  if (!body[field].is_string()) return bad(field, "must be a string");
  return body[field].get<std::string>();
}

Result<std::string> pod_name_field(const json& body, const char* field) {
  auto value = optional_string(body, field);
  if (!value) return value;
  if (value->empty()) return bad(field, "missing or empty");
  if (value->size() > 253) return bad(field, "longer than 253 characters");
  for (unsigned char c : *value) {
    if (c < 0x21 || c > 0x7e || c == '/') return bad(field, "contains a space, '/' or a non-printable character");
  }
  return value;
}

Result<std::optional<int>> mask_prefix(const json& address, const base::IpAddr& ip, const std::string& field) {
  if (!address.contains("Mask") || address["Mask"].is_null()) return std::optional<int>();
  if (!address["Mask"].is_string()) return bad(field, "must be a base64 string");
  auto bytes = decode_base64(address["Mask"].get<std::string>());
  const std::size_t want = ip.is_v4() ? 4 : 16;
  if (!bytes || bytes->size() != want) return bad(field, "must be base64 of " + std::to_string(want) + " bytes");
  int prefix = 0;
  bool ended = false;
  for (unsigned char b : *bytes) {
    const int ones = std::countl_one(b);
    if (ended && b != 0) return bad(field, "netmask is not contiguous");
    if (ones < 8 && (static_cast<unsigned char>(b << ones) != 0)) return bad(field, "netmask is not contiguous");
    prefix += ones;
    if (ones < 8) ended = true;
  }
  return std::optional<int>(prefix);
}

Result<PodIp> parse_ip(const json& entry, const std::string& field) {
  if (!entry.is_object()) return bad(field, "must be an object");
  PodIp out;
  if (entry.contains("Interface") && !entry["Interface"].is_null()) {
    if (!entry["Interface"].is_number_integer()) return bad(field + ".Interface", "must be an integer or null");
    out.interface = entry["Interface"].get<int>();
  }
  if (!entry.contains("Address") || !entry["Address"].is_object()) return bad(field + ".Address", "missing object");
  const json& address = entry["Address"];
  if (!address.contains("IP") || !address["IP"].is_string()) return bad(field + ".Address.IP", "missing string");
  auto ip = base::IpAddr::parse(address["IP"].get<std::string>());
  if (!ip) return bad(field + ".Address.IP", "not an IP address");
  out.ip = *ip;
  auto prefix = mask_prefix(address, *ip, field + ".Address.Mask");
  if (!prefix) return std::unexpected(prefix.error());
  out.prefix_len = *prefix;
  if (entry.contains("Gateway") && !entry["Gateway"].is_null()) {
    auto gw = entry["Gateway"].is_string() ? base::IpAddr::parse(entry["Gateway"].get<std::string>())
                                           : fail(Errc::kInvalidArgument, "");
    if (!gw) return bad(field + ".Gateway", "not an IP address");
    out.gateway = *gw;
  }
  return out;
}

Result<std::string> netns_field(const json& body, EventKind kind) {
  auto netns = optional_string(body, "Netns");
  if (!netns) return netns;
  if (netns->empty()) {
    if (kind == EventKind::kAdd) return bad("Netns", "missing or empty");
    return netns;
  }
  if (netns->front() != '/') return bad("Netns", "must be an absolute path");
  if (netns->find("/../") != std::string::npos || netns->ends_with("/..")) return bad("Netns", "must not contain ..");
  if (netns->find('\0') != std::string::npos) return bad("Netns", "contains NUL");
  return netns;
}

// The netmask of a /`prefix_len` network of `ip`'s family, as raw bytes (Go `net.IPMask`).
std::string netmask_bytes(const base::IpAddr& ip, int prefix_len) {
  const std::size_t len = ip.is_v4() ? 4 : 16;
  std::string mask(len, '\0');
  for (std::size_t bit = 0; bit < static_cast<std::size_t>(std::max(prefix_len, 0)) && bit < len * 8; ++bit) {
    mask[bit / 8] = static_cast<char>(static_cast<unsigned char>(mask[bit / 8]) | (0x80u >> (bit % 8)));
  }
  return mask;
}

}  // namespace

std::string encode_base64(std::string_view bytes) {
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

std::string encode_plugin_event(const PluginEvent& event) {
  using OrderedJson = nlohmann::ordered_json;
  OrderedJson body;
  body["Netns"] = event.netns;
  body["PodName"] = event.pod_name;
  body["PodNamespace"] = event.pod_namespace;
  body["IPs"] = OrderedJson::array();
  for (const PodIp& ip : event.ips) {
    OrderedJson entry;
    entry["Interface"] = ip.interface ? OrderedJson(*ip.interface) : OrderedJson(nullptr);
    entry["Address"]["IP"] = ip.ip.to_string();
    if (ip.prefix_len) entry["Address"]["Mask"] = encode_base64(netmask_bytes(ip.ip, *ip.prefix_len));
    entry["Gateway"] = ip.gateway ? OrderedJson(ip.gateway->to_string()) : OrderedJson(nullptr);
    body["IPs"].push_back(std::move(entry));
  }
  body["PodUID"] = event.pod_uid;
  if (!event.service_account.empty()) body["PodServiceAccount"] = event.service_account;
  body["ContainerID"] = event.container_id;
  body["IfName"] = event.ifname;
  return body.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}


std::optional<std::string> decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const bool last_group = i + 4 == text.size();
      if (c == '=' && last_group && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0 || (v[k] = value(c)) < 0) return std::nullopt;
    }
    // Bits a padded group drops must be zero (RFC 4648 §3.5): otherwise two texts decode to the
    // same bytes, and a Mask is no longer a single canonical spelling.
    if ((pad == 2 && (v[1] & 0x0f) != 0) || (pad == 1 && (v[2] & 0x03) != 0)) return std::nullopt;
    const unsigned triple = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>(triple >> 16);
    if (pad < 2) out += static_cast<char>((triple >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(triple & 0xff);
  }
  return out;
}

Result<PluginEvent> parse_plugin_event(std::string_view body, EventKind kind) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("body", body.empty() ? "empty" : "not valid JSON");
  if (!doc.is_object()) return bad("body", "must be a JSON object");
  PluginEvent event;
  auto netns = netns_field(doc, kind);
  if (!netns) return std::unexpected(netns.error());
  event.netns = std::move(*netns);
  for (auto [field, target] : {std::pair{"PodName", &event.pod_name}, std::pair{"PodNamespace", &event.pod_namespace}}) {
    auto value = pod_name_field(doc, field);
    if (!value) return std::unexpected(value.error());
    *target = std::move(*value);
  }
  for (auto [field, target] : {std::pair{"PodUID", &event.pod_uid}, std::pair{"PodServiceAccount", &event.service_account},
                               std::pair{"ContainerID", &event.container_id}, std::pair{"IfName", &event.ifname}}) {
    auto value = optional_string(doc, field);
    if (!value) return std::unexpected(value.error());
    *target = std::move(*value);
  }
  if (event.pod_uid.empty()) event.pod_uid = event.pod_namespace + "/" + event.pod_name;
  if (event.service_account.empty()) event.service_account = "default";
  if (doc.contains("IPs") && !doc["IPs"].is_null()) {
    if (!doc["IPs"].is_array()) return bad("IPs", "must be a list");
    for (std::size_t i = 0; i < doc["IPs"].size(); ++i) {
      auto ip = parse_ip(doc["IPs"][i], "IPs[" + std::to_string(i) + "]");
      if (!ip) return std::unexpected(ip.error());
      event.ips.push_back(std::move(*ip));
    }
  }
  return event;
}

}  // namespace meshnode::nodeapi
