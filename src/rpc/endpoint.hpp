#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace meshnode::rpc {

using base::Result;

/// Environment variables by name (a copy of `environ`, or a table in tests).
using Env = std::map<std::string, std::string, std::less<>>;

/// The current process environment. Reads `environ`; call at startup.
[[nodiscard]] Env process_environment();

/// How to reach one Istio control plane service (istiod's xDS or CA), configured like the reference
/// node proxy (research §3.1). Plain value; no gRPC types, so config code need not include gRPC.
struct Endpoint {
  /// As configured, with the scheme added when missing: "https://istiod.istio-system.svc:15012".
  /// "http://..." means plaintext (local labs and tests only; istiod serves TLS on 15012).
  std::string address;
  /// "host:port" passed to gRPC.
  std::string target;
  bool tls = true;
  /// <PREFIX>_ROOT_CA: an existing file path, "SYSTEM" (the OS roots), or inline PEM.
  std::string root_ca;
  /// ALT_<PREFIX>_HOSTNAME: the name the server certificate is checked against instead of the
  /// host of `address` (gRPC supports one name; the reference accepts either).
  std::string alt_hostname;
  /// AUTH_TOKEN: an existing file path (re-read for every call, so a rotated projected token is
  /// picked up), or a static token; empty = no authorization header.
  std::string auth_token;
  /// ISTIO_META_CLUSTER_ID, else CLUSTER_ID, else "Kubernetes": the `clusterid` header.
  std::string cluster_id = "Kubernetes";
  /// <PREFIX>_HEADER_<name>=<value> → extra metadata `<name lower-cased>: <value>`, sorted by name.
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The endpoint for `prefix` ("XDS" or "CA") from `env`: <PREFIX>_ADDRESS, <PREFIX>_ROOT_CA,
/// ALT_<PREFIX>_HOSTNAME, AUTH_TOKEN, CLUSTER_ID / ISTIO_META_CLUSTER_ID, <PREFIX>_HEADER_*.
/// Defaults as the reference: root CA ./var/run/secrets/istio/root-cert.pem when that file exists
/// (else SYSTEM), token ./var/run/secrets/tokens/istio-token when it exists (else none).
/// @returns nullopt when <PREFIX>_ADDRESS is unset or empty (meshnode's default: the local config
///          or the built-in CA); Errc::kConfig for a scheme other than http/https, or a missing port.
[[nodiscard]] Result<std::optional<Endpoint>> endpoint_from_env(const Env& env, std::string_view prefix);

/// Parses "[scheme://]host:port" into `endpoint.address/target/tls` (scheme default https).
/// Errc::kConfig naming the text when it has another scheme or no port.
[[nodiscard]] Result<void> set_address(Endpoint& endpoint, std::string_view address);

/// The PEM roots to verify the server with: the file's content, inline PEM, or "" for SYSTEM.
/// Errc::kConfig when the value is neither an existing file, "SYSTEM" nor PEM; Errc::kIo when the
/// file cannot be read. Blocking file I/O (control thread).
[[nodiscard]] Result<std::string> root_pem(const Endpoint& endpoint);

/// The token for `authorization: Bearer <token>` (file content, trimmed), "" when none.
/// Errc::kIo when the token file exists but cannot be read. Blocking file I/O (control thread).
[[nodiscard]] Result<std::string> bearer_token(const Endpoint& endpoint);

/// Every call's metadata: authorization (when a token exists), clusterid, then the extra headers.
/// Errors as bearer_token.
[[nodiscard]] Result<std::vector<std::pair<std::string, std::string>>> call_metadata(
    const Endpoint& endpoint);

/// "24h", "90m", "30s", "500ms" or a bare number of seconds → milliseconds.
/// Errc::kConfig naming the text otherwise (base::parse_duration: also when huge, e.g. "1e300").
[[nodiscard]] Result<std::chrono::milliseconds> parse_duration(std::string_view text);

}  // namespace meshnode::rpc
