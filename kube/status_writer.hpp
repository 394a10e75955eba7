#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "kube/backoff.hpp"
#include "kube/client.hpp"
#include "kube/config.hpp"

namespace meshnode::kube {

/// How a StatusWriter retries.
struct StatusWriterOptions {
  Encoding encoding = Encoding::kProtobuf;  ///< of the replies it reads; patches are always JSON
  BackoffPolicy backoff;
  int max_attempts = 8;  ///< per request, for transport failures, 429 and 5xx
  HttpOptions http;
};

/// Writes pod annotations (ambient.istio.io/redirection) as JSON merge patches on the
/// pods/<name>/status subresource (anchors §C.6), on its own thread with its own connection, so
/// callers on event or Asio threads never block on the API server.
///
/// A newer request for the same pod and annotation replaces a queued or retrying older one: only
/// the latest wanted value is written. Transport failures, 429 and 5xx are retried with Backoff up
/// to `max_attempts`; any other refusal (404: the pod is gone; 403: RBAC) ends the request at once.
/// `done(pod_key, result)` (optional) runs on the writer's thread after each request ends (not for
/// superseded ones). Any thread may call any member except from inside `done`.
class StatusWriter {
 public:
  using Done = std::function<void(const std::string& pod_key, const base::Result<void>& result)>;

  /// Starts the writer thread. Errc::kConfig for an unusable `config`.
  [[nodiscard]] static base::Result<std::unique_ptr<StatusWriter>> start(ClusterConfig config,
                                                                         StatusWriterOptions options = {},
                                                                         Done done = {});
  ~StatusWriter();
  StatusWriter(const StatusWriter&) = delete;
  StatusWriter& operator=(const StatusWriter&) = delete;

  /// Queues "annotation `key` of pod `namespace_`/`name` := `value`" (nullopt removes it). Never
  /// blocks.
  void set_annotation(std::string namespace_, std::string name, std::string key, std::optional<std::string> value);

  /// Blocks until nothing is queued or in flight, or `timeout` passes; returns whether it drained.
  bool flush(std::chrono::milliseconds timeout);

  /// Requests still queued or in flight.
  [[nodiscard]] std::size_t pending() const;

  /// Stops the thread (a request in flight is interrupted, queued ones are dropped). Idempotent.
  void stop();

  [[nodiscard]] const ClientStats& stats() const noexcept;

 private:
  struct Impl;
  explicit StatusWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::kube
