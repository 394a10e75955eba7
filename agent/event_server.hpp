#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::agent {

/// One plugin-event request (HTTP/1.1 over the Unix socket).
struct EventRequest {
  std::string method;  ///< e.g. "POST"
  std::string path;    ///< e.g. "/cmdadd" (before '?')
  std::string body;    ///< the Content-Length body
  pid_t peer_pid = 0;  ///< SO_PEERCRED of the connection (for logs)
};

/// The answer to one request; the server adds Content-Length and `Connection: close`.
struct EventResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

/// Handles one request; may block (rule programming, ZDS exchange). Called from the connection's
/// thread, but never for two requests at once (the server serializes handler calls).
using EventHandler = std::function<EventResponse(const EventRequest&)>;

/// Limits of the plugin-event server.
struct EventServerLimits {
  std::size_t max_head_bytes = 8 * 1024;       ///< request line + headers (→ 431)
  std::size_t max_body_bytes = 64 * 1024;      ///< Content-Length body (→ 413)
  std::chrono::milliseconds io_timeout{2000};  ///< per connection: to read a whole request; and to write
  std::size_t max_connections = 32;            ///< connections being read at once; one more → 503 at once
};

/// Who may talk to the server (issue 13 trust boundary).
struct EventServerAccess {
  /// The only peer uid (SO_PEERCRED) served: root, as the container runtime runs CNI plugins as
  /// root. Tests without root set their own uid.
  uid_t peer_uid = 0;
  /// Called once per refused connection with the reason label ("peer_uid", "overload"); any thread.
  std::function<void(std::string_view reason)> on_refused;
};

/// A small blocking HTTP/1.1 server on an AF_UNIX stream socket for the CNI plugin's events
/// (research §1.3, §2.5), and a trust boundary: the socket file is mode 0600 (a stale file is
/// replaced) and its directory, which must be owned by us and must not be a shared sticky
/// directory like /tmp, is created or set to mode 0700. Every connection's SO_PEERCRED uid must be
/// `access.peer_uid`, else it gets 403 and is closed (counted via `on_refused`).
///
/// Concurrency: every accepted connection is read on its own thread with its own deadline
/// (`io_timeout` from accept), so idle or slow clients never delay another client's request;
/// handler calls are serialized in the order their requests completed. One request per connection
/// (`Connection: close`). Garbage → 400, oversized head → 431, oversized body → 413,
/// Transfer-Encoding → 501, more than `max_connections` being read → 503, slow client → closed
/// without an answer after `io_timeout`.
class EventServer {
 public:
  /// Binds `path`, starts the accept thread. Errc::kIo naming the step (mkdir, bind, chmod,
  /// listen); Errc::kInvalidArgument when the directory is not ours or is a shared one.
  [[nodiscard]] static base::Result<std::unique_ptr<EventServer>> start(std::string path, EventHandler handler,
                                                                       EventServerLimits limits = {},
                                                                       EventServerAccess access = {});
  ~EventServer();
  EventServer(const EventServer&) = delete;
  EventServer& operator=(const EventServer&) = delete;

  /// Stops accepting, wakes every connection thread, joins them (after a handler in progress),
  /// removes the socket file. Idempotent; any thread but the server's own.
  void stop();

 private:
  struct Impl;
  explicit EventServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::agent
