#include "admin/admin_routes.hpp"

#include <fmt/format.h>

#include <utility>

namespace meshnode::admin {

using http::HttpRequest;
using http::HttpResponse;

void add_admin_routes(http::HttpServer& server, std::function<std::string()> config_dump_json,
                      std::function<void()> quit) {
  server.route("/config_dump", [dump = std::move(config_dump_json)](const HttpRequest&) {
    return HttpResponse{.content_type = "application/json", .body = dump()};
  });
  server.route("/quitquitquit", [quit = std::move(quit)](const HttpRequest& request) {
    if (request.method != "POST") return http::method_not_allowed("POST");
    return HttpResponse{.body = "shutdown now\n", .after_response = quit};
  });
  server.route("/", [&server](const HttpRequest&) {
    std::string body = "meshnode admin\n";
    for (const auto& path : server.paths()) body += fmt::format("  {}\n", path);
    return HttpResponse{.body = std::move(body)};
  });
}

}  // namespace meshnode::admin
