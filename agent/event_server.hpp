#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "base/error.hpp"

namespace meshnode::agent {

/// One plugin-event request (HTTP/1.1 over the Unix socket).
struct EventRequest {
  std::string method;  ///< e.g. "POST"
  std::string path;    ///< e.g. "/cmdadd" (before '?')
  std::string body;    ///< the Content-Length body
};

/// The answer to one request; the server adds Content-Length and `Connection: close`.
struct EventResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

/// Handles one request; runs on the server thread and may block (rule programming, ZDS exchange).
using EventHandler = std::function<EventResponse(const EventRequest&)>;

/// Limits of the plugin-event server.
struct EventServerLimits {
  std::size_t max_head_bytes = 8 * 1024;             ///< request line + headers (→ 431)
  std::size_t max_body_bytes = 64 * 1024;            ///< Content-Length body (→ 413)
  std::chrono::milliseconds io_timeout{5000};        ///< to read a whole request / write a response
};

/// A small blocking HTTP/1.1 server on an AF_UNIX stream socket for the CNI plugin's events
/// (research §1.3, §2.5): the socket file is created with mode 0666 (a stale file is replaced) in
/// its directory, which is created with mode 0750 when missing. One request per connection (`Connection: close`), connections served
/// one at a time on an internal thread, so events are handled strictly in arrival order.
/// Garbage → 400, oversized head → 431, oversized body → 413, Transfer-Encoding → 501, slow client
/// → connection closed after `io_timeout`.
class EventServer {
 public:
  /// Binds `path`, starts the thread. Errc::kIo naming the step (mkdir, bind, chmod, listen).
  [[nodiscard]] static base::Result<std::unique_ptr<EventServer>> start(std::string path, EventHandler handler,
                                                                       EventServerLimits limits = {});
  ~EventServer();
  EventServer(const EventServer&) = delete;
  EventServer& operator=(const EventServer&) = delete;

  /// Stops accepting, joins the thread (after the request in progress), removes the socket file.
  /// Idempotent; any thread but the server's own.
  void stop();

 private:
  struct Impl;
  explicit EventServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::agent
