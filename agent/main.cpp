// meshnode-agent: flags → AgentOptions → Agent + health/metrics servers; runs until SIGTERM/SIGINT.
// CLI11 lives only in this file (it is the most expensive header of the build).
#include <CLI/CLI.hpp>
#include <asio/io_context.hpp>
#include <csignal>
#include <iostream>
#include <thread>

#include "http/http_server.hpp"
#include "telemetry/metrics.hpp"
#include "agent/agent.hpp"
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
};

void add_flags(CLI::App& cli, Flags& f) {
  cli.add_option("--plugin-socket", f.options.plugin_socket, "CNI plugin event socket (HTTP/1.1)")->capture_default_str();
  cli.add_option("--zds-socket", f.options.zds_socket, "ZDS socket the node proxy connects to")->capture_default_str();
  cli.add_option("--run-dir", f.options.run_dir, "directory for enrolled-pod records")->capture_default_str();
  cli.add_option("--netns-root", f.options.netns_root, "prefix for netns paths from CNI events (e.g. /host)");
  cli.add_option("--redirect", f.redirect, "in-pod redirection backend")
      ->check(CLI::IsMember({"nftables", "iptables"}))
      ->capture_default_str();
  cli.add_option("--policy", f.policy_file, "enrollment policy YAML (enrollNamespaces, enrollPodNamePatterns, "
                                            "excludeNamespaces); none = enroll nothing");
  cli.add_option("--probe-snat-ip", f.options.redirect.probe_snat_v4, "kubelet probe SNAT IPv4")->capture_default_str();
  cli.add_option("--probe-snat-ipv6", f.options.redirect.probe_snat_v6, "kubelet probe SNAT IPv6")->capture_default_str();
  cli.add_option("--listen-host", f.listen_host, "address of the health and metrics ports")->capture_default_str();
  cli.add_option("--health-port", f.health_port, "/healthz and /readyz")->capture_default_str();
  cli.add_option("--monitoring-port", f.metrics_port, "Prometheus /metrics")->capture_default_str();
  cli.add_option("--log-level", f.log_level, "trace|debug|info|warn|error|off")->capture_default_str();
}

int run(Flags& flags) {
  if (auto logging = meshnode::base::init_logging(flags.log_level); !logging) {
    std::cerr << "meshnode-agent: " << logging.error().message() << "\n";
    return 2;
  }
  flags.options.backend = *meshnode::agent::parse_backend(flags.redirect);
  if (!flags.policy_file.empty()) {
    auto policy = meshnode::agent::load_policy(flags.policy_file);
    if (!policy) {
      spdlog::error("meshnode-agent: {}", policy.error().message());
      return 2;
    }
    flags.options.policy = std::move(*policy);
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
  asio::io_context io;
  auto servers = meshnode::agent::start_health_servers(io, **agent, registry, flags.listen_host, flags.health_port,
                                                       flags.metrics_port);
  if (!servers) {
    spdlog::error("meshnode-agent: {}", servers.error().message());
    return 1;
  }
  std::thread io_thread([&io] { io.run(); });
  spdlog::info("meshnode-agent: ready redirect={} plugin_socket={} zds_socket={} run_dir={}", flags.redirect,
               flags.options.plugin_socket, flags.options.zds_socket, flags.options.run_dir);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("meshnode-agent: signal {} received, stopping (pods stay enrolled)", signal);
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
  return run(flags);
}
