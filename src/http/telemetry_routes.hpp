#pragma once

#include "http/http_server.hpp"
#include "telemetry/metrics.hpp"
#include "telemetry/readiness.hpp"

namespace meshnode::http {

/// Prometheus text exposition content type (format 0.0.4).
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

/// Installs `GET /healthz/ready` (feature map §4.8): 200 `ready\n` when `readiness` has nothing
/// pending, else 500 `not ready, pending: a, b\n` (sorted); any other method → 405.
/// `readiness` must outlive the server.
void add_readiness_routes(HttpServer& server, const telemetry::Readiness& readiness);

/// Installs `/metrics` and `/stats/prometheus` (§5.1): the registry rendered as text format 0.0.4,
/// any method. `registry` must outlive the server.
void add_metrics_routes(HttpServer& server, const telemetry::MetricsRegistry& registry);

}  // namespace meshnode::http
