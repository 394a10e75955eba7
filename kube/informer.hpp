#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "kube/backoff.hpp"
#include "kube/client.hpp"
#include "kube/config.hpp"
#include "kube/types.hpp"

namespace meshnode::kube {

/// How an informer lists and watches (client-go reflector semantics, anchors §C.5).
template <class T>
struct InformerOptions {
  std::string field_selector;   ///< pods of this node: "spec.nodeName=<NODE_NAME>"
  std::string label_selector;
  Encoding encoding = Encoding::kProtobuf;
  std::int64_t page_size = 500;  ///< list limit (client-go's pager); 0 = one request
  /// Watch timeoutSeconds is drawn from [min, max] for each watch so that a fleet of agents does
  /// not reconnect in step.
  std::chrono::seconds min_watch_timeout{300};
  std::chrono::seconds max_watch_timeout{600};
  BackoffPolicy backoff;
  HttpOptions http;
  /// Applied to every object before it is cached (e.g. drop annotations the agent never reads, to
  /// keep the cache small). Runs on the informer thread; must be pure.
  std::function<void(T&)> transform;
  /// Secondary index: the values an object is found under by `Informer::by_index` (for pods: their
  /// IPs). Runs on the informer thread; must be pure.
  std::function<std::vector<std::string>(const T&)> index;
};

/// What changes the cache reports, in the order the API server made them. All three run on the
/// informer thread, after the cache already shows the change, without any informer lock held
/// (they may read the informer; they must not block for long: hand work to your own thread or
/// io_context, e.g. with asio::post).
/// - on_add: an object appeared (listed for the first time, or ADDED).
/// - on_update(old, now): it changed (a new resourceVersion). A recreated object (same
///   namespace/name, new uid) is reported as on_delete(old) + on_add(now), never as an update.
/// - on_delete(last, final_state_unknown): it is gone. `final_state_unknown` is true when the
///   deletion was inferred by a re-list (it happened while the watch was down), so `last` is the
///   last state this cache saw rather than the state at deletion.
template <class T>
struct InformerHandlers {
  std::function<void(const T&)> on_add;
  std::function<void(const T& old, const T& now)> on_update;
  std::function<void(const T& last, bool final_state_unknown)> on_delete;
};

/// Counters of one informer (monotonic, relaxed; any thread may read them).
struct InformerStats {
  std::atomic<std::uint64_t> lists{0};          ///< complete (possibly paged) lists
  std::atomic<std::uint64_t> relists{0};        ///< lists caused by 410 Expired / too old resource version
  std::atomic<std::uint64_t> watches{0};        ///< watch requests started
  std::atomic<std::uint64_t> events{0};         ///< watch events applied (incl. bookmarks)
  std::atomic<std::uint64_t> bookmarks{0};
  std::atomic<std::uint64_t> errors{0};         ///< failed lists/watches (each followed by a backoff)
};

/// A list+watch cache of one resource kind (Pods or Namespaces, cluster-wide or filtered by
/// selectors), kept current on its own thread with blocking libcurl:
/// - list: paged (limit/continue); the first list asks for resourceVersion=0 (served from the
///   API server's watch cache), later ones for the most recent state; an expired continue token
///   restarts the list without paging;
/// - watch from the list's resourceVersion with allowWatchBookmarks; each event and bookmark
///   advances the resume point, so a watch that ends (timeoutSeconds, dropped connection,
///   truncated frame, server restart) resumes where it stopped and misses nothing;
/// - 410 Expired / "too old resource version" (an HTTP 410 or an ERROR event in a 200 stream):
///   list again and reconcile the cache (adds, updates and deletes are reported);
/// - any other failure: retry after Backoff (800 ms ×2 → 30 s).
///
/// Threads: every public member may be called from any thread. Reads take a mutex for the
/// duration of a map lookup and hand out immutable snapshots (`shared_ptr<const T>`) that stay
/// valid however the cache changes afterwards. `wait_*` block the caller: never call them on an
/// Asio worker (use the handlers and post instead).
template <class T>
class Informer {
 public:
  /// Starts the informer thread. The first list happens on that thread; use wait_for_sync.
  /// Errc::kConfig for an unusable `config` (see HttpClient::create).
  [[nodiscard]] static base::Result<std::unique_ptr<Informer>> start(ClusterConfig config, InformerOptions<T> options,
                                                                     InformerHandlers<T> handlers = {});
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  /// The object "namespace/name" (or "name"), or null.
  [[nodiscard]] std::shared_ptr<const T> get(std::string_view key) const;
  /// Every cached object, in no particular order.
  [[nodiscard]] std::vector<std::shared_ptr<const T>> list() const;
  /// Objects whose `InformerOptions::index` values include `value` (e.g. pods with IP 10.0.0.5).
  [[nodiscard]] std::vector<std::shared_ptr<const T>> by_index(std::string_view value) const;
  [[nodiscard]] std::size_t size() const;

  /// True once the first list completed (the cache then reflects the cluster at that point).
  [[nodiscard]] bool synced() const;
  /// Blocks until synced or `timeout` passes; returns synced().
  bool wait_for_sync(std::chrono::milliseconds timeout) const;

  /// Blocks until the object `key` is cached and `ready` (when given) accepts it, or `timeout`
  /// passes (then returns null). For the CNI ADD path: the pod may reach the node's kubelet a few
  /// milliseconds before it reaches this watch.
  [[nodiscard]] std::shared_ptr<const T> wait_for(std::string_view key, std::chrono::milliseconds timeout,
                                                  const std::function<bool(const T&)>& ready = {}) const;

  /// The resourceVersion the next watch would resume from ("" before the first list).
  [[nodiscard]] std::string resource_version() const;
  [[nodiscard]] const InformerStats& stats() const noexcept;
  /// Undecodable list items and watch events skipped so far (each logged at warn).
  [[nodiscard]] std::uint64_t bad_objects() const noexcept;

  /// Stops the thread (interrupting a blocked request) and joins it. Idempotent; not from a
  /// handler.
  void stop();

 private:
  struct Impl;
  explicit Informer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using PodInformer = Informer<Pod>;
using NamespaceInformer = Informer<Namespace>;

}  // namespace meshnode::kube
