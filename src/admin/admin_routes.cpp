#include "admin/admin_routes.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

namespace meshnode::admin {
namespace {

HttpResponse method_not_allowed(std::string_view allowed) {
  HttpResponse response;
  response.status = 405;
  response.body = fmt::format("method not allowed, use {}\n", allowed);
  response.headers.emplace_back("Allow", std::string(allowed));
  return response;
}

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

void add_admin_routes(HttpServer& server, std::function<std::string()> config_dump_json,
                      std::function<void()> quit) {
  server.route("/config_dump", [dump = std::move(config_dump_json)](const HttpRequest&) {
    return HttpResponse{.content_type = "application/json", .body = dump()};
  });
  server.route("/quitquitquit", [quit = std::move(quit)](const HttpRequest& request) {
    if (request.method != "POST") return method_not_allowed("POST");
    return HttpResponse{.body = "shutdown now\n", .after_response = quit};
  });
  server.route("/", [&server](const HttpRequest&) {
    std::string body = "meshnode admin\n";
    for (const auto& path : server.paths()) body += fmt::format("  {}\n", path);
    return HttpResponse{.body = std::move(body)};
  });
}

}  // namespace meshnode::admin
