#include "fakes/resource_loader.hpp"

#include <arpa/inet.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "authorization.pb.h"
#include "workload.pb.h"

namespace meshnode::fakes {
namespace {

using base::Errc;
using base::fail;
using nlohmann::json;
using Resource = envoy::service::discovery::v3::Resource;

constexpr std::string_view kAddressType = "type.googleapis.com/istio.workload.Address";
constexpr std::string_view kAuthorizationType = "type.googleapis.com/istio.security.Authorization";

// YAML → JSON: plain scalars that read as a bool, an integer or null become those; quoted ones stay strings.
json to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = to_json(kv.second);
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() == "!") return text;
      if (text == "true") return true;
      if (text == "false") return false;
      if (text == "null" || text == "~") return nullptr;
      if (!text.empty() && text.find_first_not_of("-0123456789") == std::string::npos && text != "-") {
        try {
          return std::stoll(text);
        } catch (const std::exception&) {
        }
      }
      return text;
    }
    default:
      return nullptr;
  }
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// The raw bytes of a textual IP, or "" when `text` is not one.
std::string ip_bytes(const std::string& text) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, text.c_str(), buf) == 1) return std::string(reinterpret_cast<char*>(buf), 4);
  if (inet_pton(AF_INET6, text.c_str(), buf) == 1) return std::string(reinterpret_cast<char*>(buf), 16);
  return "";
}

// Textual IPs under "address" / "addresses" → base64 of their bytes (the JSON mapping of `bytes`).
void encode_ips(json& j) {
  auto encode = [](json& v) {
    if (!v.is_string()) return;
    if (auto raw = ip_bytes(v.get<std::string>()); !raw.empty()) v = base64(raw);
  };
  if (j.is_array()) {
    for (auto& item : j) encode_ips(item);
    return;
  }
  if (!j.is_object()) return;
  for (auto& [key, value] : j.items()) {
    if (key == "address") encode(value);
    if (key == "addresses" && value.is_array()) {
      for (auto& item : value) encode(item);
    }
    encode_ips(value);
  }
}

base::Result<void> from_json(const json& j, google::protobuf::Message& msg, const std::string& what) {
  json copy = j;
  encode_ips(copy);
  auto status = google::protobuf::util::JsonStringToMessage(copy.dump(), &msg);
  if (!status.ok()) return fail(Errc::kConfig, what + ": " + std::string(status.message()));
  return {};
}

base::Result<void> add_unknown_fields(const json& entry, google::protobuf::Message& msg, const std::string& what) {
  if (!entry.contains("unknownFields")) return {};
  auto* unknown = msg.GetReflection()->MutableUnknownFields(&msg);
  for (const auto& [number, value] : entry["unknownFields"].items()) {
    int n = 0;
    try {
      n = std::stoi(number);
    } catch (const std::exception&) {
      return fail(Errc::kConfig, what + ": unknownFields key '" + number + "' is not a field number");
    }
    unknown->AddLengthDelimited(n, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return {};
}

std::string version_of(const std::string& payload) {
  std::ostringstream out;
  out << std::hex << std::hash<std::string>{}(payload);
  return out.str();
}

Resource make_resource(std::string name, const google::protobuf::Message& payload, std::string_view type_url,
                       const json& entry) {
  Resource r;
  r.set_name(std::move(name));
  auto* any = r.mutable_resource();
  any->set_type_url(std::string(type_url));
  any->set_value(payload.SerializeAsString());
  r.set_version(entry.contains("version") ? entry["version"].get<std::string>() : version_of(any->value()));
  return r;
}

}  // namespace

base::Result<ResourceSet> parse_resources(std::string_view text) {
  json doc;
  try {
    doc = to_json(YAML::Load(std::string(text)));
  } catch (const std::exception& e) {
    return fail(Errc::kConfig, std::string("resource file: ") + e.what());
  }
  ResourceSet out;
  if (doc.is_null()) return out;
  if (!doc.is_object() || (doc.contains("resources") && !doc["resources"].is_array())) {
    return fail(Errc::kConfig, "resource file: expected {resources: [...]}");
  }
  if (!doc.contains("resources")) return out;
  int index = 0;
  for (const auto& entry : doc["resources"]) {
    const std::string what = "resources[" + std::to_string(index++) + "]";
    if (!entry.is_object()) return fail(Errc::kConfig, what + ": expected a map");
    std::string name = entry.contains("name") ? entry["name"].get<std::string>() : "";
    if (entry.contains("workload") || entry.contains("service")) {
      istio::workload::Address address;
      if (entry.contains("workload")) {
        auto* w = address.mutable_workload();
        if (auto ok = from_json(entry["workload"], *w, what + ".workload"); !ok) return std::unexpected(ok.error());
        if (auto ok = add_unknown_fields(entry, *w, what); !ok) return std::unexpected(ok.error());
        if (name.empty()) name = w->uid();
      } else {
        auto* s = address.mutable_service();
        if (auto ok = from_json(entry["service"], *s, what + ".service"); !ok) return std::unexpected(ok.error());
        if (auto ok = add_unknown_fields(entry, *s, what); !ok) return std::unexpected(ok.error());
        if (name.empty()) name = s->namespace_() + "/" + s->hostname();
      }
      Resource r = make_resource(name, address, kAddressType, entry);
      if (address.has_workload()) {
        for (const auto& ip : address.workload().addresses()) {
          char buf[64] = {};
          int family = ip.size() == 16 ? AF_INET6 : AF_INET;
          if ((ip.size() == 4 || ip.size() == 16) && inet_ntop(family, ip.data(), buf, sizeof buf) != nullptr) {
            r.add_aliases(address.workload().network() + "/" + buf);
          }
        }
      }
      out.addresses.push_back(std::move(r));
    } else if (entry.contains("authorization")) {
      istio::security::Authorization policy;
      if (auto ok = from_json(entry["authorization"], policy, what + ".authorization"); !ok) {
        return std::unexpected(ok.error());
      }
      if (auto ok = add_unknown_fields(entry, policy, what); !ok) return std::unexpected(ok.error());
      if (name.empty()) name = policy.namespace_() + "/" + policy.name();
      out.authorizations.push_back(make_resource(name, policy, kAuthorizationType, entry));
    } else {
      return fail(Errc::kConfig, what + ": expected one of workload, service, authorization");
    }
  }
  return out;
}

base::Result<ResourceSet> load_resources(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return fail(Errc::kIo, "cannot read " + file.string());
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = parse_resources(text.str());
  if (!parsed) return fail(Errc::kConfig, file.string() + ": " + parsed.error().context);
  return parsed;
}

}  // namespace meshnode::fakes
