// meshnode-agent: flags → AgentOptions → Agent + health/metrics servers; runs until SIGTERM/SIGINT.
// CLI11 lives only in this file (it is the most expensive header of the build).
#include <CLI/CLI.hpp>
#include <asio/io_context.hpp>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "http/http_server.hpp"
#include "telemetry/metrics.hpp"
#include "agent/agent.hpp"
#include "agent/cni_install.hpp"
#include "agent/health.hpp"
#include "base/log.hpp"

namespace {

using meshnode::agent::AgentOptions;

struct Flags {
  AgentOptions options;
  std::string redirect = "nftables";
  std::string policy_file;
  std::string log_level = "info";
  std::string listen_host = "0.0.0.0";
  std::uint16_t health_port = 8000;
  std::uint16_t metrics_port = 15014;
  // CNI install step (issue 14); off unless a conf dir is given.
  meshnode::agent::CniInstallOptions install{.bin_dir = "/host/opt/cni/bin"};
  std::vector<std::string> exclude_namespaces;  // added to the policy's (which default to kube-system)
  bool chained = true;
  bool cleanup_on_stop = false;
  // Kubernetes (issue 13): on with --kubeconfig, or in a cluster (KUBERNETES_SERVICE_HOST) unless
  // --policy asks for the YAML mode.
  std::string kubeconfig;
  std::string kube_context;
  std::string kube_encoding = "protobuf";
  std::string node_name;
  int host_rules_seconds = 10;
};

// Istio's install-cni environment names (research §3.2), so a chart's values map across.
void add_install_flags(CLI::App& cli, Flags& f) {
  cli.add_option("--cni-net-dir", f.install.conf_dir,
                 "install step: the node's CNI conf dir as seen here (e.g. /host/etc/cni/net.d); empty = no install")
      ->envname("MOUNTED_CNI_NET_DIR");
  cli.add_option("--cni-bin-dir", f.install.bin_dir, "install step: the runtime's CNI bin dir as seen here")
      ->envname("CNI_BIN_DIR")
      ->capture_default_str();
  cli.add_option("--cni-plugin-binary", f.install.plugin_binary,
                 "install step: the meshnode-cni to copy (default: next to this executable)");
  cli.add_option("--cni-conf-name", f.install.conf_name,
                 "install step: the config file to chain into (default: the first one by name)")
      ->envname("CNI_CONF_NAME");
  cli.add_option("--chained-cni-plugin", f.chained, "install step: chain into the primary CNI (only true is supported)")
      ->envname("CHAINED_CNI_PLUGIN")
      ->capture_default_str();
  cli.add_option("--exclude-namespaces", f.exclude_namespaces,
                 "namespaces never enrolled, added to the policy's excludeNamespaces (all of them go into the plugin "
                 "entry, so such pods never reach the agent)")
      ->envname("EXCLUDE_NAMESPACES")
      ->delimiter(',');
  cli.add_option("--replace-cni-plugins", f.install.replace_types,
                 "install step: plugin types taken out of the chain (e.g. istio-cni when replacing Istio)")
      ->envname("MESHNODE_REPLACE_CNI_PLUGINS")
      ->delimiter(',');
  cli.add_flag("--cleanup-on-stop", f.cleanup_on_stop,
               "on SIGTERM remove the plugin entry and every pod's rules (uninstall); default keeps both (upgrade)")
      ->envname("AMBIENT_DISABLE_SAFE_UPGRADE");
}

// The plugin shipped next to this executable (/usr/local/bin in the image).
std::string default_plugin_binary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : (self.parent_path() / "meshnode-cni").string();
}

void add_flags(CLI::App& cli, Flags& f) {
  cli.add_option("--plugin-socket", f.options.plugin_socket,
                 "CNI plugin event socket (HTTP/1.1); default $CNI_AGENT_RUN_DIR/pluginevent.sock when that is set")
      ->capture_default_str();
  cli.add_option("--zds-socket", f.options.zds_socket, "ZDS socket the node proxy connects to")
      ->envname("ZTUNNEL_UDS_ADDRESS")
      ->capture_default_str();
  cli.add_option("--run-dir", f.options.run_dir, "directory for enrolled-pod records")->capture_default_str();
  cli.add_option("--netns-root", f.options.netns_root, "prefix for netns paths from CNI events (e.g. /host)");
  cli.add_option("--redirect", f.redirect, "in-pod redirection backend")
      ->check(CLI::IsMember({"nftables", "iptables"}))
      ->capture_default_str();
  cli.add_option("--policy", f.policy_file, "enrollment policy YAML (enrollNamespaces, enrollPodNamePatterns, "
                                            "excludeNamespaces); none = enroll nothing");
  cli.add_option("--probe-snat-ip", f.options.redirect.probe_snat_v4, "kubelet probe SNAT IPv4")->capture_default_str();
  cli.add_option("--probe-snat-ipv6", f.options.redirect.probe_snat_v6, "kubelet probe SNAT IPv6")->capture_default_str();
  f.options.host_probe_snat = true;
  cli.add_option("--host-probe-snat", f.options.host_probe_snat,
                 "SNAT the node's own TCP to enrolled pods (kubelet probes) to --probe-snat-ip")
      ->capture_default_str();
  cli.add_option("--host-rules-interval", f.host_rules_seconds, "seconds between checks that the host probe rules are intact")
      ->check(CLI::Range(1, 300))
      ->capture_default_str();
  cli.add_option("--listen-host", f.listen_host, "address of the health and metrics ports")->capture_default_str();
  cli.add_option("--health-port", f.health_port, "/healthz and /readyz")->capture_default_str();
  cli.add_option("--monitoring-port", f.metrics_port, "Prometheus /metrics")->envname("MONITORING_PORT")->capture_default_str();
  cli.add_option("--log-level", f.log_level, "trace|debug|info|warn|error|off")->envname("LOG_LEVEL")->capture_default_str();
  cli.add_option("--kubeconfig", f.kubeconfig,
                 "kubeconfig file of the API server (default in a cluster: the pod's service account)");
  cli.add_option("--kube-context", f.kube_context, "kubeconfig context (default: current-context)");
  cli.add_option("--kube-encoding", f.kube_encoding, "list/watch encoding")
      ->check(CLI::IsMember({"protobuf", "json"}))
      ->capture_default_str();
  cli.add_option("--node-name", f.node_name, "this node's name: pods are watched with spec.nodeName=<it>")
      ->envname("NODE_NAME");
  add_install_flags(cli, f);
}

// The Kubernetes options, or nullopt for the YAML mode; exits with a message on a bad config.
meshnode::base::Result<std::optional<meshnode::agent::KubeOptions>> kube_options(const Flags& f) {
  const bool in_cluster = std::getenv("KUBERNETES_SERVICE_HOST") != nullptr;
  if (!f.kubeconfig.empty() && !f.policy_file.empty()) {
    return meshnode::base::fail(meshnode::base::Errc::kConfig, "--policy and --kubeconfig exclude each other: "
                                                               "the YAML policy is the mode without Kubernetes");
  }
  if (f.kubeconfig.empty() && (!in_cluster || !f.policy_file.empty())) return std::nullopt;
  auto cluster = f.kubeconfig.empty()
                     ? meshnode::kube::in_cluster_config(meshnode::kube::InClusterSource::from_environment())
                     : meshnode::kube::kubeconfig_config(f.kubeconfig, f.kube_context);
  if (!cluster) return std::unexpected(cluster.error());
  meshnode::agent::KubeOptions o;
  o.cluster = std::move(*cluster);
  o.node_name = f.node_name;
  if (o.node_name.empty()) {
    return meshnode::base::fail(meshnode::base::Errc::kConfig, "NODE_NAME (--node-name) is required with Kubernetes");
  }
  o.encoding = f.kube_encoding == "json" ? meshnode::kube::Encoding::kJson : meshnode::kube::Encoding::kProtobuf;
  for (const auto& ns : f.exclude_namespaces) {
    if (std::ranges::find(o.enrollment.exclude_namespaces, ns) == o.enrollment.exclude_namespaces.end()) {
      o.enrollment.exclude_namespaces.push_back(ns);
    }
  }
  o.proc_root = f.options.netns_root + "/proc";
  return o;
}

// Starts the install step when a conf dir is configured; nullptr otherwise.
meshnode::base::Result<std::unique_ptr<meshnode::agent::CniInstaller>> start_installer(Flags& flags) {
  if (flags.install.conf_dir.empty()) return nullptr;
  if (flags.install.plugin_binary.empty()) flags.install.plugin_binary = default_plugin_binary();
  flags.install.entry = {flags.options.plugin_socket, flags.options.policy.exclude_namespaces, "warn"};
  return meshnode::agent::CniInstaller::start(flags.install);
}

int run(Flags& flags) {
  if (auto logging = meshnode::base::init_logging(flags.log_level); !logging) {
    std::cerr << "meshnode-agent: " << logging.error().message() << "\n";
    return 2;
  }
  flags.options.backend = *meshnode::agent::parse_backend(flags.redirect);
  flags.options.host_rules_interval = std::chrono::seconds(flags.host_rules_seconds);
  if (!flags.policy_file.empty()) {
    auto policy = meshnode::agent::load_policy(flags.policy_file);
    if (!policy) {
      spdlog::error("meshnode-agent: {}", policy.error().message());
      return 2;
    }
    flags.options.policy = std::move(*policy);
  }
  if (!flags.install.conf_dir.empty() && !flags.chained) {
    spdlog::error("meshnode-agent: CHAINED_CNI_PLUGIN=false is not supported: meshnode-cni only runs chained "
                  "after the primary CNI");
    return 2;
  }
  auto kube = kube_options(flags);
  if (!kube) {
    spdlog::error("meshnode-agent: {}", kube.error().message());
    return 2;
  }
  flags.options.kube = std::move(*kube);
  auto& excluded = flags.options.policy.exclude_namespaces;
  for (const auto& ns : flags.exclude_namespaces) {
    if (std::ranges::find(excluded, ns) == excluded.end()) excluded.push_back(ns);
  }
  // Block the stop signals before any thread starts so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  meshnode::telemetry::MetricsRegistry registry;
  auto agent = meshnode::agent::Agent::start(flags.options, registry);
  if (!agent) {
    spdlog::error("meshnode-agent: cannot start: {}", agent.error().message());
    return 1;
  }
  // After the agent: the entry is chained only once the event server can answer the plugin.
  auto installer = start_installer(flags);
  if (!installer) {
    spdlog::error("meshnode-agent: {}", installer.error().message());
    return 2;
  }
  asio::io_context io;
  auto servers = meshnode::agent::start_health_servers(io, **agent, registry, flags.listen_host, flags.health_port,
                                                       flags.metrics_port, installer->get());
  if (!servers) {
    spdlog::error("meshnode-agent: {}", servers.error().message());
    return 1;
  }
  std::thread io_thread([&io] { io.run(); });
  spdlog::info("meshnode-agent: ready redirect={} plugin_socket={} zds_socket={} run_dir={} cni_install=\"{}\" "
               "enrollment={}",
               flags.redirect, flags.options.plugin_socket, flags.options.zds_socket, flags.options.run_dir,
               *installer ? (*installer)->status() : "off",
               flags.options.kube ? "kubernetes " + flags.options.kube->cluster.source + " node " + flags.options.kube->node_name
                                  : (flags.policy_file.empty() ? std::string("none") : "policy " + flags.policy_file));
  int signal = 0;
  sigwait(&stop_signals, &signal);
  if (flags.cleanup_on_stop) {
    spdlog::info("meshnode-agent: signal {} received, uninstalling: plugin entry first, then every pod's rules", signal);
    if (*installer) {
      if (auto removed = (*installer)->uninstall(); !removed) spdlog::error("meshnode-agent: {}", removed.error().message());
    }
    (*agent)->release_all_pods();
  } else {
    spdlog::info("meshnode-agent: signal {} received, stopping (pods stay enrolled, plugin entry stays)", signal);
    if (*installer) (*installer)->stop();
  }
  servers->health->stop();
  servers->metrics->stop();
  io.stop();
  io_thread.join();
  (*agent)->stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"meshnode-agent: node agent of an ambient service mesh (enrollment, in-pod redirection, ZDS)"};
  Flags flags;
  add_flags(cli, flags);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  // istio-cni's CNI_AGENT_RUN_DIR holds the plugin event socket when --plugin-socket is not given.
  if (const char* run_dir = std::getenv("CNI_AGENT_RUN_DIR"); run_dir != nullptr && cli.count("--plugin-socket") == 0) {
    flags.options.plugin_socket = std::string(run_dir) + "/pluginevent.sock";
  }
  // Istio's NATIVE_NFTABLES (research §3.2) chooses the backend when --redirect is not given.
  if (const char* native = std::getenv("NATIVE_NFTABLES"); native != nullptr && cli.count("--redirect") == 0) {
    flags.redirect = std::string_view(native) == "true" ? "nftables" : "iptables";
  }
  return run(flags);
}
