// /healthz, /readyz and /metrics of meshnode-agent on the small HTTP/1.1 server (src/http).
#include "agent/health.hpp"

#include "agent/agent.hpp"
#include "agent/cni_install.hpp"
#include "http/http_server.hpp"
#include "http/telemetry_routes.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::agent {

base::Result<HealthServers> start_health_servers(asio::io_context& io, const Agent& agent,
                                                 const telemetry::MetricsRegistry& registry, const std::string& host,
                                                 std::uint16_t health_port, std::uint16_t metrics_port,
                                                 const CniInstaller* installer) {
  HealthServers servers{std::make_unique<http::HttpServer>(io, "health"),
                        std::make_unique<http::HttpServer>(io, "monitoring")};
  servers.health->route("/healthz", [](const http::HttpRequest&) { return http::HttpResponse{200, "text/plain", "ok\n"}; });
  servers.health->route("/readyz", [&agent, installer](const http::HttpRequest&) {
    if (!agent.ready()) return http::HttpResponse{503, "text/plain", "not ready\n"};
    if (installer != nullptr && !installer->ready()) {
      return http::HttpResponse{503, "text/plain", "not ready: cni install: " + installer->status() + "\n"};
    }
    return http::HttpResponse{200, "text/plain", "ready\n"};
  });
  http::add_metrics_routes(*servers.metrics, registry);
  if (auto bound = servers.health->listen(host, health_port); !bound) return std::unexpected(bound.error());
  if (auto bound = servers.metrics->listen(host, metrics_port); !bound) return std::unexpected(bound.error());
  return servers;
}

}  // namespace meshnode::agent
