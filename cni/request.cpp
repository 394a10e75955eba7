#include "cni/request.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

namespace meshnode::cni {

namespace {

using OrderedJson = nlohmann::ordered_json;

std::unexpected<CniError> error(std::string_view version, ErrorCode code, std::string msg,
                                std::string details = {}) {
  return std::unexpected(CniError{std::string(version), code, std::move(msg), std::move(details)});
}

/// Finds the text of one member of a JSON object that nlohmann already accepted, so only the
/// grammar needed to skip values is implemented. The last occurrence wins, as in nlohmann's DOM.
class MemberScanner {
 public:
  explicit MemberScanner(std::string_view text) : s_(text) {}

  std::optional<std::string_view> find(std::string_view key) {
    std::optional<std::string_view> found;
    if (s_.starts_with("\xEF\xBB\xBF")) i_ = 3;  // nlohmann skips a UTF-8 BOM
    skip_ws();
    if (!consume('{')) return std::nullopt;
    skip_ws();
    if (consume('}')) return std::nullopt;
    while (i_ < s_.size()) {
      skip_ws();
      const std::size_t key_begin = i_;
      if (!skip_string()) return std::nullopt;
      const std::string_view raw_key = s_.substr(key_begin, i_ - key_begin);
      skip_ws();
      if (!consume(':')) return std::nullopt;
      skip_ws();
      const std::size_t value_begin = i_;
      if (!skip_value()) return std::nullopt;
      if (key_equals(raw_key, key)) found = s_.substr(value_begin, i_ - value_begin);
      skip_ws();
      if (consume('}')) return found;
      if (!consume(',')) return std::nullopt;
    }
    return std::nullopt;
  }

 private:
  static bool key_equals(std::string_view raw_key, std::string_view key) {
    if (raw_key.find('\\') == std::string_view::npos) return raw_key.substr(1, raw_key.size() - 2) == key;
    try {
      return OrderedJson::parse(raw_key).get<std::string>() == key;
    } catch (const OrderedJson::exception&) {
      return false;
    }
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool consume(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool skip_string() {
    if (!consume('"')) return false;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '\\') {
        ++i_;
      } else if (c == '"') {
        return true;
      }
    }
    return false;
  }
  bool skip_value() {
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') return skip_string();
    if (c == '{' || c == '[') {
      int depth = 0;
      while (i_ < s_.size()) {
        const char d = s_[i_];
        if (d == '"') {
          if (!skip_string()) return false;
          continue;
        }
        ++i_;
        if (d == '{' || d == '[') ++depth;
        if ((d == '}' || d == ']') && --depth == 0) return true;
      }
      return false;
    }
    // number, true, false, null
    while (i_ < s_.size() && std::strchr(",}] \t\r\n", s_[i_]) == nullptr) ++i_;
    return true;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

bool valid_container_id(std::string_view id) {
  if (id.empty() || !std::isalnum(static_cast<unsigned char>(id[0]))) return false;
  return std::ranges::all_of(id, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

bool valid_ifname(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.size() >= 16) return false;
  return std::ranges::none_of(
      name, [](char c) { return c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c)); });
}

std::optional<std::string_view> lookup(const Env& env, std::string_view name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

/// Reads an optional string member; code 7 naming the field when it is present with another type.
std::expected<std::optional<std::string>, CniError> optional_string(const OrderedJson& doc, const char* field,
                                                                    std::string_view version) {
  auto it = doc.find(field);
  if (it == doc.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    return error(version, ErrorCode::kInvalidNetworkConfig, std::string(field) + ": must be a string");
  return it->get<std::string>();
}

std::expected<void, CniError> parse_options(const OrderedJson& doc, PluginConfig& config) {
  const std::string& v = config.cni_version;
  auto socket = optional_string(doc, "agentSocket", v);
  if (!socket) return std::unexpected(socket.error());
  if (*socket) {
    // sun_path holds 108 bytes including the terminating NUL.
    if ((*socket)->empty() || (*socket)->size() > 107) {
      return error(v, ErrorCode::kInvalidNetworkConfig, "agentSocket: must be a path of 1..107 bytes",
                   **socket);
    }
    config.agent_socket = **socket;
  }
  if (auto it = doc.find("excludeNamespaces"); it != doc.end() && !it->is_null()) {
    if (!it->is_array() || !std::ranges::all_of(*it, [](const auto& e) { return e.is_string(); })) {
      return error(v, ErrorCode::kInvalidNetworkConfig, "excludeNamespaces: must be a list of strings");
    }
    for (const auto& ns : *it) config.exclude_namespaces.push_back(ns.get<std::string>());
  }
  auto level = optional_string(doc, "logLevel", v);
  if (!level) return std::unexpected(level.error());
  if (*level) {
    static constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    if (std::ranges::find(kLevels, **level) == std::end(kLevels)) {
      return error(v, ErrorCode::kInvalidNetworkConfig,
                   "logLevel: must be one of trace|debug|info|warn|error|off", **level);
    }
    config.log_level = **level;
  }
  auto default_ns = optional_string(doc, "defaultPodNamespace", v);
  if (!default_ns) return std::unexpected(default_ns.error());
  if (*default_ns) {
    if ((*default_ns)->empty())
      return error(v, ErrorCode::kInvalidNetworkConfig, "defaultPodNamespace: must not be empty");
    config.default_pod_namespace = **default_ns;
  }
  return {};
}

}  // namespace

Env env_from(char** envp) {
  Env env;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

std::expected<Command, CniError> parse_command(const Env& env) {
  auto value = lookup(env, "CNI_COMMAND");
  if (!value || value->empty()) {
    return error(kPreferredVersion, ErrorCode::kInvalidEnvironment, "CNI_COMMAND: required");
  }
  if (*value == "ADD") return Command::kAdd;
  if (*value == "DEL") return Command::kDel;
  if (*value == "CHECK") return Command::kCheck;
  if (*value == "VERSION") return Command::kVersion;
  return error(kPreferredVersion, ErrorCode::kInvalidEnvironment,
               "CNI_COMMAND: must be ADD, DEL, CHECK or VERSION", std::string(*value));
}

std::expected<std::map<std::string, std::string, std::less<>>, CniError> parse_cni_args(
    std::string_view args) {
  std::map<std::string, std::string, std::less<>> pairs;
  while (!args.empty()) {
    const auto semi = args.find(';');
    const std::string_view pair = args.substr(0, semi);
    args = semi == std::string_view::npos ? std::string_view{} : args.substr(semi + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return error(kPreferredVersion, ErrorCode::kInvalidEnvironment,
                   "CNI_ARGS: invalid pair (want KEY=VALUE)", std::string(pair));
    }
    pairs.insert_or_assign(std::string(pair.substr(0, eq)), std::string(pair.substr(eq + 1)));
  }
  return pairs;
}

std::expected<PluginConfig, CniError> parse_config(std::string_view stdin_text) {
  OrderedJson doc;
  try {
    doc = OrderedJson::parse(stdin_text);
  } catch (const OrderedJson::exception& e) {
    return error(kPreferredVersion, ErrorCode::kDecodeFailure, "failed to decode network configuration",
                 e.what());
  }
  if (!doc.is_object()) {
    return error(kPreferredVersion, ErrorCode::kDecodeFailure, "failed to decode network configuration",
                 "not a JSON object");
  }
  PluginConfig config;
  auto version = doc.find("cniVersion");
  if (version == doc.end() || !version->is_string() || version->get_ref<const std::string&>().empty()) {
    return error(kPreferredVersion, ErrorCode::kInvalidNetworkConfig, "cniVersion: required string");
  }
  config.cni_version = version->get<std::string>();
  const std::string& v = config.cni_version;
  if (!is_supported_version(v)) {
    return error(v, ErrorCode::kIncompatibleVersion, "incompatible CNI version",
                 "cniVersion " + v + " is not one of 0.3.0, 0.3.1, 0.4.0, 1.0.0");
  }
  for (const char* field : {"name", "type"}) {
    auto it = doc.find(field);
    if (it == doc.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
      return error(v, ErrorCode::kInvalidNetworkConfig, std::string(field) + ": required string");
    }
  }
  config.name = doc["name"].get<std::string>();
  config.type = doc["type"].get<std::string>();
  if (auto ok = parse_options(doc, config); !ok) return std::unexpected(ok.error());
  if (auto it = doc.find("prevResult"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return error(v, ErrorCode::kInvalidNetworkConfig, "prevResult: must be an object");
    config.prev_result = *it;
    if (auto text = MemberScanner(stdin_text).find("prevResult"))
      config.prev_result_text = std::string(*text);
  }
  return config;
}

std::expected<Request, CniError> parse_request(Command command, const Env& env, std::string_view stdin_text) {
  // The config is decoded first only to learn the cniVersion that env errors must carry
  // (CNI spec 1.0 §Error: "the same value as provided by the configuration").
  auto config = parse_config(stdin_text);
  const std::string version = config ? config->cni_version : std::string(kPreferredVersion);
  auto env_error = [&](std::string msg, std::string details = {}) {
    return error(version, ErrorCode::kInvalidEnvironment, std::move(msg), std::move(details));
  };

  Request req;
  req.command = command;
  req.container_id = lookup(env, "CNI_CONTAINERID").value_or("");
  if (req.container_id.empty()) return env_error("CNI_CONTAINERID: required");
  if (!valid_container_id(req.container_id)) {
    return env_error("CNI_CONTAINERID: must start with a letter or digit, then [A-Za-z0-9_.-]",
                     req.container_id);
  }
  req.netns = lookup(env, "CNI_NETNS").value_or("");
  if (req.netns.empty() && command != Command::kDel) return env_error("CNI_NETNS: required");
  req.ifname = lookup(env, "CNI_IFNAME").value_or("");
  if (req.ifname.empty()) return env_error("CNI_IFNAME: required");
  if (!valid_ifname(req.ifname)) {
    return env_error("CNI_IFNAME: must be 1..15 bytes without '/', ':' or whitespace, not '.' or '..'",
                     req.ifname);
  }
  auto args = parse_cni_args(lookup(env, "CNI_ARGS").value_or(""));
  if (!args) return env_error(args.error().msg, args.error().details);

  if (!config) return std::unexpected(config.error());
  req.config = std::move(*config);
  if (command == Command::kCheck && !supports_check(req.config.cni_version)) {
    return error(version, ErrorCode::kIncompatibleVersion, "CHECK requires cniVersion 0.4.0 or later",
                 "cniVersion " + version);
  }
  auto arg = [&](std::string_view key) {
    auto it = args->find(key);
    return it == args->end() ? std::string() : it->second;
  };
  req.pod.name = arg("K8S_POD_NAME");
  req.pod.ns = arg("K8S_POD_NAMESPACE");
  if (req.pod.ns.empty()) req.pod.ns = req.config.default_pod_namespace;
  req.pod.uid = arg("K8S_POD_UID");
  return req;
}

}  // namespace meshnode::cni
