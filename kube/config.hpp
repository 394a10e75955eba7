#pragma once

#include <string>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::kube {

/// Where and how to reach one API server. Either PEM text or a file path is set for each of CA,
/// client certificate and client key (the file is read by libcurl at each connection). The bearer
/// token is either fixed (`token`) or re-read from `token_file` before every request: projected
/// service-account tokens rotate (about hourly) and the kubelet rewrites the file in place.
struct ClusterConfig {
  std::string server;           ///< base URL, e.g. "https://10.96.0.1:443" (no trailing slash)
  std::string ca_file;          ///< PEM bundle that signs the server's certificate
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;
  std::string token;
  std::string token_file;
  std::string namespace_;       ///< the context's default namespace ("" when none)
  std::string source;           ///< for logs: "in-cluster" or "kubeconfig <path> context <name>"
};

/// Inputs of the in-cluster configuration (client-go rest.InClusterConfig): the service's
/// address from the environment and the service-account files the kubelet mounts.
struct InClusterSource {
  std::string host;  ///< $KUBERNETES_SERVICE_HOST (IPv6 literals are bracketed in the URL)
  std::string port;  ///< $KUBERNETES_SERVICE_PORT
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

  /// host/port from the process environment, default file paths.
  [[nodiscard]] static InClusterSource from_environment();
};

/// The configuration of a pod running in the cluster. Errc::kConfig when host or port is unset
/// ("not running in a cluster") or the token file is unreadable or empty. Reads files.
[[nodiscard]] base::Result<ClusterConfig> in_cluster_config(const InClusterSource& source);

/// The configuration named by a kubeconfig file (kubectl's format): `context` or, when empty,
/// current-context; its cluster (server, certificate-authority[-data], insecure-skip-tls-verify)
/// and user (client-certificate[-data], client-key[-data], token, tokenFile). Relative paths are
/// relative to the file's directory; *-data fields are base64 PEM.
/// @returns Errc::kConfig naming the path and the missing or unsupported entry (exec and
///          auth-provider plugins are not supported: they run programs on the node).
[[nodiscard]] base::Result<ClusterConfig> kubeconfig_config(const std::string& path, std::string_view context = {});

/// The bearer token to send now: `token`, or the current content of `token_file` (trailing
/// whitespace trimmed); "" when neither is set. Errc::kConfig when the file cannot be read.
/// Blocking file read; call it from the client's own threads.
[[nodiscard]] base::Result<std::string> bearer_token(const ClusterConfig& config);

}  // namespace meshnode::kube
