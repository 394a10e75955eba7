#pragma once

#include <functional>
#include <string>

#include "admin/http_server.hpp"
#include "telemetry/metrics.hpp"
#include "telemetry/readiness.hpp"

namespace meshnode::admin {

/// Prometheus text exposition content type (format 0.0.4).
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

/// Installs `GET /healthz/ready` (feature map §4.8): 200 `ready\n` when `readiness` has nothing
/// pending, else 500 `not ready, pending: a, b\n` (sorted); any other method → 405.
/// `readiness` must outlive the server.
void add_readiness_routes(HttpServer& server, const telemetry::Readiness& readiness);

/// Installs `/metrics` and `/stats/prometheus` (§5.1): the registry rendered as text format 0.0.4,
/// any method. `registry` must outlive the server.
void add_metrics_routes(HttpServer& server, const telemetry::MetricsRegistry& registry);

/// Installs the admin routes (§5.2): `/config_dump` (application/json, body from
/// `config_dump_json`, called on the server's thread), `/quitquitquit` (POST only, else 405;
/// replies `shutdown now\n`, then calls `quit` once the reply is written) and `/` (plain-text
/// index of the server's paths).
void add_admin_routes(HttpServer& server, std::function<std::string()> config_dump_json,
                      std::function<void()> quit);

}  // namespace meshnode::admin
