// meshnode-proxy: flags and environment → Options → run_proxy. CLI11 lives only in this file
// (it costs ~10 s of compile time per translation unit).
#include <CLI/CLI.hpp>

#include "app/options.hpp"

int main(int argc, char** argv) {
  meshnode::app::Options o;
  CLI::App cli{"meshnode-proxy: node proxy of an ambient service mesh (HBONE, mTLS, L4)"};
  cli.add_option("--config", o.config_path, "Local YAML config (workloads, services, policies)")
      ->envname("LOCAL_XDS_PATH");
  cli.add_option("--ca-dir", o.ca_dir, "Built-in CA directory (root-cert.pem, root-key.pem; created if absent)")
      ->envname("MESHNODE_CA_DIR");
  cli.add_option("--crl-path", o.crl_path, "PEM CRL file checked on both HBONE sides (reloaded on change)")
      ->envname("CRL_PATH");
  cli.add_option("--inpod-uds", o.inpod_uds,
                 "Node agent ZDS socket (e.g. /var/run/ztunnel/ztunnel.sock): pods are enrolled over ZDS")
      ->envname("INPOD_UDS");
  cli.add_option("--proxy-mode", o.proxy_mode, "shared (pods enrolled over ZDS) | dedicated (--pod only)")
      ->envname("PROXY_MODE")
      ->check(CLI::IsMember({"shared", "dedicated"}));
  cli.add_option("--pod", o.pods, "Enroll a pod: <workload uid>=<netns path> (repeatable)");
  cli.add_flag("--socks5", o.socks5, "Listen for socks5 on 127.0.0.1:15080 in each pod")
      ->envname("UNSTABLE_ENABLE_SOCKS5");
  cli.add_flag("--transparent-inbound", o.transparent_inbound,
               "Connect to apps from the original client IP (needs the node agent's in-pod policy routing)")
      ->envname("MESHNODE_TRANSPARENT_INBOUND");
  cli.add_flag("--hbone-early-data,!--no-hbone-early-data", o.hbone_early_data,
               "Send what an app already wrote with its HBONE CONNECT, to node proxies (saves a round trip); "
               "off: wait for the 200 first")
      ->envname("MESHNODE_HBONE_EARLY_DATA")
      ->capture_default_str();
  cli.add_option("--worker-threads", o.worker_threads, "Data worker threads")
      ->envname("ZTUNNEL_WORKER_THREADS")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cli.add_option("--log-level", o.log_level, "trace|debug|info|warn|error|off")
      ->envname("LOG_LEVEL")
      ->capture_default_str();
  cli.add_option("--termination-deadline", o.termination_deadline, "Drain deadline on shutdown (e.g. 5s, 500ms)")
      ->envname("CONNECTION_TERMINATION_DEADLINE")
      ->capture_default_str();
  cli.add_option("--admin-addr", o.admin_addr, "Admin server (config_dump, quitquitquit)")->capture_default_str();
  cli.add_option("--metrics-addr", o.metrics_addr, "Prometheus metrics server")->capture_default_str();
  cli.add_option("--readiness-addr", o.readiness_addr, "Readiness server (/healthz/ready)")->capture_default_str();
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = cli.exit(e);
    return rc == 0 ? 0 : meshnode::app::kExitConfig;
  }
  if (o.proxy_mode.empty()) o.proxy_mode = o.inpod_uds.empty() ? "dedicated" : "shared";
  if (o.proxy_mode == "shared" && o.inpod_uds.empty()) o.inpod_uds = meshnode::app::kDefaultInpodUds;
  if (o.proxy_mode == "dedicated") o.inpod_uds.clear();
  return meshnode::app::run_proxy(o);
}
