#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/error.hpp"

namespace asio {
class io_context;
}
namespace meshnode::http {
class HttpServer;
}  // namespace meshnode::http
namespace meshnode::telemetry {
class MetricsRegistry;
}  // namespace meshnode::telemetry

namespace meshnode::agent {

class Agent;
class CniInstaller;

/// The agent's HTTP ports (research §1.2): `/healthz` (always 200) and `/readyz` (200 while the
/// event and ZDS servers are up and, with an installer, our CNI entry is chained; else 503 with the
/// reason) on the health port (8000), Prometheus `/metrics` on the
/// monitoring port (15014). Both on `host`; port 0 = ephemeral.
struct HealthServers {
  std::unique_ptr<http::HttpServer> health;
  std::unique_ptr<http::HttpServer> metrics;
};

/// Starts both servers on `io` (run by one thread). `agent`, `registry` and `installer` (nullable:
/// no install step) must outlive them. Errc::kIo naming host:port when a bind fails.
[[nodiscard]] base::Result<HealthServers> start_health_servers(asio::io_context& io, const Agent& agent,
                                                               const telemetry::MetricsRegistry& registry,
                                                               const std::string& host, std::uint16_t health_port,
                                                               std::uint16_t metrics_port,
                                                               const CniInstaller* installer = nullptr);

}  // namespace meshnode::agent
