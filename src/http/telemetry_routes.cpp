#include "http/telemetry_routes.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace meshnode::http {
namespace {

HttpResponse readiness_response(const telemetry::Readiness& readiness) {
  const auto pending = readiness.pending();
  if (pending.empty()) return HttpResponse{.body = "ready\n"};
  return HttpResponse{.status = 500,
                      .body = fmt::format("not ready, pending: {}\n", fmt::join(pending, ", "))};
}

}  // namespace

void add_readiness_routes(HttpServer& server, const telemetry::Readiness& readiness) {
  server.route("/healthz/ready", [&readiness](const HttpRequest& request) {
    if (request.method != "GET") return method_not_allowed("GET");
    return readiness_response(readiness);
  });
}

void add_metrics_routes(HttpServer& server, const telemetry::MetricsRegistry& registry) {
  auto render = [&registry](const HttpRequest&) {
    return HttpResponse{.content_type = kPrometheusContentType, .body = registry.render()};
  };
  server.route("/metrics", render);
  server.route("/stats/prometheus", render);
}

}  // namespace meshnode::http
