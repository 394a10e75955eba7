#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "kube/codec.hpp"
#include "kube/http.hpp"
#include "kube/types.hpp"

namespace meshnode::kube {

/// Query of a list request (apimachinery ListOptions, anchors §C.5). Empty strings are omitted.
struct ListOptions {
  std::string label_selector;
  std::string field_selector;          ///< e.g. "spec.nodeName=node-1"
  std::string resource_version;        ///< "0": any (watch cache); "": most recent (consistent read)
  std::string resource_version_match;  ///< "NotOlderThan" | "Exact"
  std::int64_t limit = 0;              ///< page size; 0 = everything at once
  std::string continue_token;
};

/// Query of a watch request.
struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;      ///< events strictly after this version
  bool allow_bookmarks = true;
  std::chrono::seconds timeout{300};  ///< timeoutSeconds: the server ends the watch cleanly then
};

/// What a watch stream carried: decoded events, events skipped as undecodable, bytes.
struct WatchTally {
  std::size_t events = 0;
  std::size_t skipped = 0;
  std::size_t bytes = 0;
};

/// Counts shared by everything that uses one Client (relaxed atomics; any thread may read).
struct ClientStats {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> request_errors{0};  ///< transport failures and non-2xx answers
  std::atomic<std::uint64_t> bad_objects{0};     ///< list items and watch events skipped as undecodable
};

/// Typed Kubernetes API calls for Pods and Namespaces over one HttpClient: list, watch, get and
/// JSON merge patch on pods/status. Blocking; one thread at a time (the HttpClient's rule);
/// `interrupt` from any thread.
///
/// Encoding: with Encoding::kProtobuf (the default) requests send
/// `Accept: application/vnd.kubernetes.protobuf, application/json` and decode whatever the server
/// chose by its Content-Type (as Istio's client does, anchors §C.6); with kJson only JSON is asked
/// for. Writes are always JSON merge patches.
///
/// Errors: an API refusal is Errc::kNotFound (404) or kProtocol, with the Status message in the
/// context and `http_status(error)` giving the code (410 = expired: list again). Transport
/// failures as HttpClient.
class Client {
 public:
  Client(std::unique_ptr<HttpClient> http, Encoding encoding = Encoding::kProtobuf);

  /// A Client over a new HttpClient for `config`. Errc::kConfig as HttpClient::create.
  [[nodiscard]] static base::Result<std::unique_ptr<Client>> create(ClusterConfig config, HttpOptions http = {},
                                                                    Encoding encoding = Encoding::kProtobuf);

  /// GET /api/v1/pods or /api/v1/namespaces (all namespaces): one page.
  /// Instantiated for Pod and Namespace.
  template <class T>
  [[nodiscard]] base::Result<List<T>> list(const ListOptions& options);

  /// Watches /api/v1/pods or /api/v1/namespaces, calling `on_event` for each decoded event in
  /// order on the calling thread until the server ends the stream (success) or `on_event` returns
  /// false (success). Undecodable events are skipped, counted and logged. A watch ERROR event
  /// ends the call with its Status as the error (http_status = its code, e.g. 410); so does a
  /// non-200 answer. A stream that ends inside a frame is Errc::kIo "truncated watch frame".
  template <class T>
  [[nodiscard]] base::Result<WatchTally> watch(const WatchOptions& options,
                                               const std::function<bool(WatchEvent<T>&)>& on_event);

  /// GET one Pod or Namespace (namespace_ "" for Namespaces).
  template <class T>
  [[nodiscard]] base::Result<T> get(std::string_view namespace_, std::string_view name);

  /// PATCH /api/v1/namespaces/<ns>/pods/<name>/status with a JSON merge patch (RFC 7386) body
  /// (anchors §C.6: pods/status is the lower-privilege subresource); returns the patched Pod.
  [[nodiscard]] base::Result<Pod> patch_pod_status(std::string_view namespace_, std::string_view name,
                                                   std::string_view merge_patch);

  /// See HttpClient::interrupt / resume.
  void interrupt() { http_->interrupt(); }
  void resume() { http_->resume(); }

  [[nodiscard]] Encoding encoding() const noexcept { return encoding_; }
  [[nodiscard]] const ClientStats& stats() const noexcept { return stats_; }
  [[nodiscard]] const ClusterConfig& config() const noexcept { return http_->config(); }

 private:
  [[nodiscard]] std::string accept() const;
  [[nodiscard]] base::Result<HttpResponse> exchange(HttpRequest request);
  std::unique_ptr<HttpClient> http_;
  Encoding encoding_;
  ClientStats stats_;
};

/// The merge patch that sets (value) or removes (nullopt → JSON null) one annotation:
/// {"metadata":{"annotations":{"<key>":"<value>"|null}}}. Pure.
[[nodiscard]] std::string annotation_patch(std::string_view key, const std::optional<std::string>& value);

/// Percent-encodes a query value (RFC 3986 unreserved characters pass through). Pure.
[[nodiscard]] std::string url_escape(std::string_view text);

}  // namespace meshnode::kube
