#include "kube/config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace meshnode::kube {
namespace {

using base::Errc;
using base::fail;
using base::Result;

Result<std::string> read_text(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Errc::kConfig, "cannot read " + std::string(what) + " " + path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

Result<std::string> base64_decode(const std::string& text, std::string_view what) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    const auto pos = kAlphabet.find(c);
    if (pos == std::string_view::npos) return fail(Errc::kConfig, std::string(what) + " is not valid base64");
    buffer = (buffer << 6) | static_cast<unsigned>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

/// The `name`d entry of a kubeconfig list (clusters, users, contexts): its `key` map.
Result<YAML::Node> named(const YAML::Node& root, const char* list, const char* key, const std::string& name) {
  const auto entries = root[list];
  if (entries && entries.IsSequence()) {
    for (const auto& entry : entries) {
      if (entry["name"] && entry["name"].as<std::string>() == name) {
        if (!entry[key] || !entry[key].IsMap()) {
          return fail(Errc::kConfig, std::string(list) + " entry \"" + name + "\" has no " + key);
        }
        return entry[key];
      }
    }
  }
  return fail(Errc::kConfig, "no " + std::string(key) + " named \"" + name + "\" in " + list);
}

std::string str(const YAML::Node& node, const char* key) {
  return node[key] && node[key].IsScalar() ? node[key].as<std::string>() : std::string();
}

/// Resolves a path relative to the kubeconfig's directory (kubectl does the same).
std::string relative_to(const std::filesystem::path& dir, const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (dir / path).string();
}

/// PEM from `<key>-data` (base64) or a path from `<key>`.
Result<void> pem_or_file(const YAML::Node& node, const std::string& key, const std::filesystem::path& dir,
                         std::string& pem, std::string& file) {
  if (auto data = str(node, (key + "-data").c_str()); !data.empty()) {
    auto decoded = base64_decode(data, key + "-data");
    if (!decoded) return std::unexpected(decoded.error());
    pem = std::move(*decoded);
  } else {
    file = relative_to(dir, str(node, key.c_str()));
  }
  return {};
}

Result<ClusterConfig> from_kubeconfig(const YAML::Node& root, const std::string& path, std::string_view context_name) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::string context = context_name.empty() ? str(root, "current-context") : std::string(context_name);
  if (context.empty()) return fail(Errc::kConfig, "no current-context and no context given");
  auto ctx = named(root, "contexts", "context", context);
  if (!ctx) return std::unexpected(ctx.error());
  auto cluster = named(root, "clusters", "cluster", str(*ctx, "cluster"));
  if (!cluster) return std::unexpected(cluster.error());
  ClusterConfig config;
  config.source = "kubeconfig " + path + " context " + context;
  config.namespace_ = str(*ctx, "namespace");
  config.server = str(*cluster, "server");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  if (config.server.empty()) return fail(Errc::kConfig, "cluster of context \"" + context + "\" has no server");
  config.insecure_skip_tls_verify = (*cluster)["insecure-skip-tls-verify"] && (*cluster)["insecure-skip-tls-verify"].as<bool>();
  if (auto r = pem_or_file(*cluster, "certificate-authority", dir, config.ca_pem, config.ca_file); !r) {
    return std::unexpected(r.error());
  }
  if (auto user_name = str(*ctx, "user"); !user_name.empty()) {
    auto user = named(root, "users", "user", user_name);
    if (!user) return std::unexpected(user.error());
    if ((*user)["exec"] || (*user)["auth-provider"]) {
      return fail(Errc::kConfig, "user \"" + user_name + "\" uses an exec/auth-provider plugin, which is not supported");
    }
    if (auto r = pem_or_file(*user, "client-certificate", dir, config.client_cert_pem, config.client_cert_file); !r) {
      return std::unexpected(r.error());
    }
    if (auto r = pem_or_file(*user, "client-key", dir, config.client_key_pem, config.client_key_file); !r) {
      return std::unexpected(r.error());
    }
    config.token = str(*user, "token");
    config.token_file = relative_to(dir, str(*user, "tokenFile"));
  }
  return config;
}

}  // namespace

InClusterSource InClusterSource::from_environment() {
  InClusterSource source;
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST")) source.host = host;
  if (const char* port = std::getenv("KUBERNETES_SERVICE_PORT")) source.port = port;
  return source;
}

Result<ClusterConfig> in_cluster_config(const InClusterSource& source) {
  if (source.host.empty() || source.port.empty()) {
    return fail(Errc::kConfig, "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
  }
  ClusterConfig config;
  const bool v6 = source.host.find(':') != std::string::npos;
  config.server = "https://" + (v6 ? "[" + source.host + "]" : source.host) + ":" + source.port;
  config.ca_file = source.ca_file;
  config.token_file = source.token_file;
  config.source = "in-cluster";
  auto token = bearer_token(config);
  if (!token) return std::unexpected(token.error());
  if (token->empty()) return fail(Errc::kConfig, "service-account token file " + source.token_file + " is empty");
  if (auto ns = read_text(source.namespace_file, "namespace file")) config.namespace_ = trim(std::move(*ns));
  return config;
}

Result<ClusterConfig> kubeconfig_config(const std::string& path, std::string_view context) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
    auto config = from_kubeconfig(root, path, context);
    if (!config) return fail(Errc::kConfig, "kubeconfig " + path + ": " + config.error().context);
    return config;
  } catch (const YAML::Exception& e) {
    return fail(Errc::kConfig, "kubeconfig " + path + ": " + e.what());
  }
}

Result<std::string> bearer_token(const ClusterConfig& config) {
  if (!config.token.empty() || config.token_file.empty()) return config.token;
  auto text = read_text(config.token_file, "token file");
  if (!text) return std::unexpected(text.error());
  return trim(std::move(*text));
}

}  // namespace meshnode::kube
