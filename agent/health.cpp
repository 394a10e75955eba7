// /healthz, /readyz and /metrics of meshnode-agent on the admin HTTP server.
#include "agent/health.hpp"

#include "admin/http_server.hpp"
#include "admin/metrics.hpp"
#include "agent/agent.hpp"
#include "agent/cni_install.hpp"

namespace meshnode::agent {

base::Result<HealthServers> start_health_servers(asio::io_context& io, const Agent& agent,
                                                 const admin::MetricsRegistry& registry, const std::string& host,
                                                 std::uint16_t health_port, std::uint16_t metrics_port,
                                                 const CniInstaller* installer) {
  HealthServers servers{std::make_unique<admin::HttpServer>(io, "health"),
                        std::make_unique<admin::HttpServer>(io, "monitoring")};
  servers.health->route("/healthz", [](const admin::HttpRequest&) { return admin::HttpResponse{200, "text/plain", "ok\n"}; });
  servers.health->route("/readyz", [&agent, installer](const admin::HttpRequest&) {
    if (!agent.ready()) return admin::HttpResponse{503, "text/plain", "not ready\n"};
    if (installer != nullptr && !installer->ready()) {
      return admin::HttpResponse{503, "text/plain", "not ready: cni install: " + installer->status() + "\n"};
    }
    return admin::HttpResponse{200, "text/plain", "ready\n"};
  });
  servers.metrics->route("/metrics", [&registry](const admin::HttpRequest&) {
    return admin::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", registry.render()};
  });
  if (auto bound = servers.health->listen(host, health_port); !bound) return std::unexpected(bound.error());
  if (auto bound = servers.metrics->listen(host, metrics_port); !bound) return std::unexpected(bound.error());
  return servers;
}

}  // namespace meshnode::agent
