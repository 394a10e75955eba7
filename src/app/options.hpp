#pragma once

#include <string>
#include <vector>

namespace meshnode::app {

/// meshnode-proxy settings from flags and environment (names follow ztunnel where one exists).
struct Options {
  std::string config_path;       ///< LOCAL_XDS_PATH / --config: local YAML config
  std::string ca_dir;            ///< MESHNODE_CA_DIR / --ca-dir: built-in CA directory
  std::vector<std::string> pods; ///< --pod <workload uid>=<netns path>, repeatable
  bool socks5 = false;           ///< UNSTABLE_ENABLE_SOCKS5 / --socks5
  int worker_threads = 2;        ///< ZTUNNEL_WORKER_THREADS / --worker-threads
  std::string log_level = "info";                ///< LOG_LEVEL / --log-level
  std::string termination_deadline = "5s";       ///< CONNECTION_TERMINATION_DEADLINE: "5s", "500ms", "5"
  std::string admin_addr = "127.0.0.1:15000";    ///< --admin-addr
  std::string metrics_addr = "0.0.0.0:15020";    ///< --metrics-addr
  std::string readiness_addr = "0.0.0.0:15021";  ///< --readiness-addr
};

/// Exit codes of meshnode-proxy.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;  ///< could not start (netns, CA, listener, port)
inline constexpr int kExitConfig = 2;   ///< bad configuration (file, flag or env value)

/// Runs the proxy until SIGTERM/SIGINT or /quitquitquit, then drains. Returns an exit code.
int run_proxy(const Options& options);

}  // namespace meshnode::app
