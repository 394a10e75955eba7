#pragma once

#include <functional>
#include <string>

#include "http/http_server.hpp"

namespace meshnode::admin {

/// Installs the admin routes (§5.2): `/config_dump` (application/json, body from
/// `config_dump_json`, called on the server's thread), `/quitquitquit` (POST only, else 405;
/// replies `shutdown now\n`, then calls `quit` once the reply is written), `/debug/memory`
/// (application/json: the process's RSS, anonymous and file-backed, the allocator's totals, and
/// `bins`, the slabs and live bytes per small size class, all in bytes; base::allocator_stats,
/// base::allocator_bins), `/debug/heap_profile` (POST only: a jemalloc heap profile
/// to the prof_prefix file, 409 naming why when profiling is off) and `/` (plain-text index of the
/// server's paths).
void add_admin_routes(http::HttpServer& server, std::function<std::string()> config_dump_json,
                      std::function<void()> quit);

}  // namespace meshnode::admin
