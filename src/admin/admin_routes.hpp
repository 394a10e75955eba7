#pragma once

#include <functional>
#include <string>

#include "http/http_server.hpp"

namespace meshnode::admin {

/// Installs the admin routes (§5.2): `/config_dump` (application/json, body from
/// `config_dump_json`, called on the server's thread), `/quitquitquit` (POST only, else 405;
/// replies `shutdown now\n`, then calls `quit` once the reply is written) and `/` (plain-text
/// index of the server's paths).
void add_admin_routes(http::HttpServer& server, std::function<std::string()> config_dump_json,
                      std::function<void()> quit);

}  // namespace meshnode::admin
