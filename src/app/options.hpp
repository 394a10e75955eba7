#pragma once

#include <string>
#include <vector>

namespace meshnode::app {

/// meshnode-proxy settings from flags and environment (names follow ztunnel where one exists).
struct Options {
  std::string config_path;       ///< LOCAL_XDS_PATH / --config: local YAML config
  std::string ca_dir;            ///< MESHNODE_CA_DIR / --ca-dir: built-in CA directory (when CA_ADDRESS is unset)
  std::string crl_path;          ///< CRL_PATH / --crl-path: PEM CRLs checked on both HBONE sides, hot-reloaded
  std::vector<std::string> pods; ///< --pod <workload uid>=<netns path>, repeatable
  std::string inpod_uds;         ///< INPOD_UDS / --inpod-uds: ZDS socket of the node agent (shared mode)
  std::string proxy_mode;        ///< PROXY_MODE / --proxy-mode: shared (ZDS) | dedicated; default shared iff INPOD_UDS is set
  bool socks5 = false;           ///< UNSTABLE_ENABLE_SOCKS5 / --socks5
  bool transparent_inbound = false;  ///< MESHNODE_TRANSPARENT_INBOUND / --transparent-inbound
  bool hbone_early_data = true;  ///< MESHNODE_HBONE_EARLY_DATA / --[no-]hbone-early-data
  int worker_threads = 2;        ///< ZTUNNEL_WORKER_THREADS / --worker-threads
  std::string log_level = "info";                ///< LOG_LEVEL / --log-level
  std::string termination_deadline = "5s";       ///< CONNECTION_TERMINATION_DEADLINE: "5s", "500ms", "5"
  std::string admin_addr = "127.0.0.1:15000";    ///< --admin-addr
  std::string metrics_addr = "0.0.0.0:15020";    ///< --metrics-addr
  std::string readiness_addr = "0.0.0.0:15021";  ///< --readiness-addr
};

/// Default ZDS socket path (Istio charts' hostPath), used in shared mode when INPOD_UDS is unset.
inline constexpr const char* kDefaultInpodUds = "/var/run/ztunnel/ztunnel.sock";

/// Exit codes of meshnode-proxy.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;  ///< could not start (netns, CA, listener, port)
inline constexpr int kExitConfig = 2;   ///< bad configuration (file, flag or env value)

/// Control-plane settings come from the environment as the reference names them: XDS_ADDRESS,
/// XDS_ROOT_CA, ALT_XDS_HOSTNAME, XDS_ON_DEMAND, CA_ADDRESS, CA_ROOT_CA, ALT_CA_HOSTNAME,
/// SECRET_TTL, AUTH_TOKEN, CLUSTER_ID, XDS_HEADER_* / CA_HEADER_*, NODE_NAME, POD_NAME, ...
/// (xds::XdsOptions::from_env, ca::IstioCaOptions::from_env).
/// Runs the proxy until SIGTERM/SIGINT or /quitquitquit, then drains. Returns an exit code.
int run_proxy(const Options& options);

}  // namespace meshnode::app
