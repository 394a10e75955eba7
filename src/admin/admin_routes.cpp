#include "admin/admin_routes.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string_view>
#include <utility>

#include "base/memory.hpp"
#include "net/reactor_records.hpp"

namespace meshnode::admin {

using http::HttpRequest;
using http::HttpResponse;

namespace {

// VmRSS, RssAnon and RssFile of /proc/self/status, in bytes (the kernel reports kB).
nlohmann::json process_rss() {
  nlohmann::json out = nlohmann::json::object();
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    for (auto [field, key] : {std::pair{"VmRSS:", "rss_bytes"}, std::pair{"RssAnon:", "rss_anon_bytes"},
                              std::pair{"RssFile:", "rss_file_bytes"}}) {
      if (!line.starts_with(field)) continue;
      out[key] = std::stoull(line.substr(std::string_view(field).size())) * 1024;
    }
  }
  return out;
}

HttpResponse memory_report() {
  nlohmann::json out = process_rss();
  out["allocator"] = base::allocator_name();
  auto s = base::allocator_stats();
  out["allocated_bytes"] = s.allocated;
  out["active_bytes"] = s.active;
  out["metadata_bytes"] = s.metadata;
  out["resident_bytes"] = s.resident;
  out["retained_bytes"] = s.retained;
  // Per small size class: where fragmentation after a peak sits (empty on glibc).
  nlohmann::json bins = nlohmann::json::array();
  for (const auto& b : base::allocator_bins()) {
    bins.push_back({{"size", b.size}, {"used_bytes", b.used_bytes}, {"slab_bytes", b.slab_bytes}, {"slabs", b.slabs}});
  }
  out["bins"] = std::move(bins);
  // Asio's per-socket records: kept for reuse after their sockets close, then deleted by the
  // workers' 30 s trim (net/reactor_records.hpp; none is kept in reserve).
  const auto r = net::reactor_record_stats();
  out["reactor_records"] = {{"created", r.created}, {"destroyed", r.destroyed}, {"retired", r.retired}};
  return HttpResponse{.content_type = "application/json", .body = out.dump(2) + "\n"};
}

}  // namespace

void add_admin_routes(http::HttpServer& server, std::function<std::string()> config_dump_json,
                      std::function<void()> quit) {
  server.route("/config_dump", [dump = std::move(config_dump_json)](const HttpRequest&) {
    return HttpResponse{.content_type = "application/json", .body = dump()};
  });
  server.route("/quitquitquit", [quit = std::move(quit)](const HttpRequest& request) {
    if (request.method != "POST") return http::method_not_allowed("POST");
    return HttpResponse{.body = "shutdown now\n", .after_response = quit};
  });
  server.route("/debug/memory", [](const HttpRequest&) { return memory_report(); });
  server.route("/debug/heap_profile", [](const HttpRequest& request) {
    if (request.method != "POST") return http::method_not_allowed("POST");
    if (auto ok = base::dump_heap_profile(); !ok) {
      return HttpResponse{.status = 409, .body = ok.error().message() + "\n"};
    }
    return HttpResponse{.body = "heap profile written (jemalloc prof_prefix)\n"};
  });
  server.route("/", [&server](const HttpRequest&) {
    std::string body = "meshnode admin\n";
    for (const auto& path : server.paths()) body += fmt::format("  {}\n", path);
    return HttpResponse{.body = std::move(body)};
  });
}

}  // namespace meshnode::admin
