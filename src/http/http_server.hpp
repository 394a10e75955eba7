#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "http/http_message.hpp"
#include "base/error.hpp"

namespace asio {
class io_context;
}  // namespace asio
namespace meshnode::telemetry {
class Counter;
}  // namespace meshnode::telemetry

namespace meshnode::http {

/// A small HTTP/1.1 server for the admin (15000), metrics (15020) and readiness (15021) ports
/// (feature map §1.2, §5.2): exact-path routes, keep-alive, no request bodies.
///
/// Per connection: the request head must arrive within 2 s (counted from accept, or from the
/// first byte of a later keep-alive request; an idle keep-alive connection is closed after 30 s)
/// and fit in 8 KiB; garbage → 400, oversized head → 431, Content-Length body over 8 KiB → 413,
/// Transfer-Encoding → 501, each followed by a close. A Content-Length body up to 8 KiB is read
/// and discarded. Unknown path → 404 listing the known paths; a throwing handler → 500.
/// Writes time out after 10 s. At most 128 connections are open at once (extra ones are closed).
///
/// Threads: the io_context must be run by one thread; handlers run there. `route` and `listen`
/// are called before the io_context runs or on its thread; `stop` and `port` from any thread.
/// Destroy the server on the io_context thread or when that thread no longer runs it: handlers
/// are never called after `stop` ran, but they may still be stored until the io_context drops
/// the connection coroutines.
class HttpServer {
 public:
  /// `name` labels log lines ("admin", "stats", "readiness"). Its accept loops and connections
  /// are tasks of its own net::DrainScope; one that ends with an exception is logged and counted
  /// in `task_failures` (may be null; must outlive the server's tasks).
  HttpServer(asio::io_context& io, std::string name, telemetry::Counter* task_failures = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Serves `path` (exact match on the path before '?') with `handler`; replaces an earlier one.
  void route(std::string path, HttpHandler handler);

  /// Registered paths, sorted.
  [[nodiscard]] std::vector<std::string> paths() const;

  /// Binds `host:port` (host: an IP literal, IPv6 with or without brackets; port 0 = ephemeral)
  /// with SO_REUSEADDR, listens, and starts accepting on the io_context. May be called more than
  /// once to serve several addresses (e.g. 127.0.0.1 and ::1).
  /// @returns Errc::kInvalidArgument if `host` is not an IP literal or the server was stopped; Errc::kIo
  /// naming host:port
  ///          (errno cause) if open/bind/listen fails.
  [[nodiscard]] base::Result<void> listen(const std::string& host, std::uint16_t port);

  /// The bound port of the first successful `listen` (the actual one for port 0); 0 before.
  [[nodiscard]] std::uint16_t port() const;

  /// Closes the listeners and every open connection; idempotent. Runs inline on the io_context
  /// thread, otherwise it is posted there.
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace meshnode::http
