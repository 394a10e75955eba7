#include "rpc/endpoint.hpp"

#include "base/duration.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

extern char** environ;

namespace meshnode::rpc {
namespace {

using base::Errc;
using base::fail;

constexpr const char* kDefaultRootCa = "./var/run/secrets/istio/root-cert.pem";
constexpr const char* kDefaultToken = "./var/run/secrets/tokens/istio-token";

std::string get(const Env& env, std::string_view name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

bool is_file(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::is_regular_file(path, ec);
}

Result<std::string> read_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::fail_errno("cannot open " + std::string(what) + " " + path, errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return base::fail_errno("cannot read " + std::string(what) + " " + path, errno);
  return text.str();
}

std::string trim(std::string s) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Env process_environment() {
  Env env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Result<void> set_address(Endpoint& endpoint, std::string_view address) {
  std::string_view rest = address;
  bool tls = true;
  if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
    tls = false;
  } else if (rest.find("://") != std::string_view::npos) {
    return fail(Errc::kConfig, "address '" + std::string(address) + "': scheme must be https or http");
  }
  while (rest.ends_with('/')) rest.remove_suffix(1);
  auto colon = rest.rfind(':');
  bool bracketed_v6 = rest.starts_with('[') && (colon == std::string_view::npos || colon < rest.find(']'));
  if (rest.empty() || colon == std::string_view::npos || colon + 1 == rest.size() || bracketed_v6) {
    return fail(Errc::kConfig, "address '" + std::string(address) + "': expected [https://]host:port");
  }
  endpoint.tls = tls;
  endpoint.target = std::string(rest);
  endpoint.address = std::string(tls ? "https://" : "http://") + endpoint.target;
  return {};
}

Result<std::optional<Endpoint>> endpoint_from_env(const Env& env, std::string_view prefix) {
  std::string p(prefix);
  std::string address = get(env, p + "_ADDRESS");
  if (address.empty()) return std::optional<Endpoint>{};
  Endpoint e;
  if (auto ok = set_address(e, address); !ok) return std::unexpected(ok.error());
  e.root_ca = get(env, p + "_ROOT_CA");
  if (e.root_ca.empty()) e.root_ca = is_file(kDefaultRootCa) ? kDefaultRootCa : "SYSTEM";
  e.alt_hostname = get(env, "ALT_" + p + "_HOSTNAME");
  e.auth_token = get(env, "AUTH_TOKEN");
  if (e.auth_token.empty() && is_file(kDefaultToken)) e.auth_token = kDefaultToken;
  std::string cluster = get(env, "ISTIO_META_CLUSTER_ID");
  if (cluster.empty()) cluster = get(env, "CLUSTER_ID");
  if (!cluster.empty()) e.cluster_id = cluster;
  std::string header_prefix = p + "_HEADER_";
  for (auto it = env.lower_bound(header_prefix); it != env.end() && it->first.starts_with(header_prefix);
       ++it) {
    std::string name = lower(it->first.substr(header_prefix.size()));
    if (!name.empty()) e.headers.emplace_back(std::move(name), it->second);
  }
  return std::optional<Endpoint>(std::move(e));
}

Result<std::string> root_pem(const Endpoint& endpoint) {
  if (endpoint.root_ca == "SYSTEM" || endpoint.root_ca.empty()) return std::string();
  if (is_file(endpoint.root_ca)) return read_file(endpoint.root_ca, "root CA");
  if (endpoint.root_ca.find("-----BEGIN CERTIFICATE-----") != std::string::npos) return endpoint.root_ca;
  return fail(Errc::kConfig, "root CA '" + endpoint.root_ca.substr(0, 64) +
                                 "' is neither an existing file, SYSTEM, nor PEM text");
}

Result<std::string> bearer_token(const Endpoint& endpoint) {
  if (endpoint.auth_token.empty()) return std::string();
  if (!is_file(endpoint.auth_token)) return endpoint.auth_token;
  auto text = read_file(endpoint.auth_token, "token file");
  if (!text) return text;
  return trim(std::move(*text));
}

Result<std::vector<std::pair<std::string, std::string>>> call_metadata(const Endpoint& endpoint) {
  auto token = bearer_token(endpoint);
  if (!token) return std::unexpected(token.error());
  std::vector<std::pair<std::string, std::string>> out;
  if (!token->empty()) out.emplace_back("authorization", "Bearer " + *token);
  out.emplace_back("clusterid", endpoint.cluster_id);
  out.insert(out.end(), endpoint.headers.begin(), endpoint.headers.end());
  return out;
}

Result<std::chrono::milliseconds> parse_duration(std::string_view text) { return base::parse_duration(text); }

}  // namespace meshnode::rpc
