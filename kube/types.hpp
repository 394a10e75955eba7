#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshnode::kube {

/// Labels or annotations: {key, value} pairs sorted by key, keys unique. A sorted vector rather
/// than a map: a pod carries a handful of each, and 10,000 cached pods make the per-node overhead
/// of a tree count.
class StringMap {
 public:
  using Entry = std::pair<std::string, std::string>;

  StringMap() = default;
  /// Takes entries in any order; a repeated key keeps its last value (as a JSON object would).
  explicit StringMap(std::vector<Entry> entries);
  StringMap(std::initializer_list<Entry> entries) : StringMap(std::vector<Entry>(entries)) {}

  /// Value of `key`, or nullptr when absent.
  [[nodiscard]] const std::string* find(std::string_view key) const;
  [[nodiscard]] bool contains(std::string_view key) const { return find(key) != nullptr; }
  [[nodiscard]] const std::vector<Entry>& entries() const noexcept { return entries_; }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
  friend bool operator==(const StringMap&, const StringMap&) = default;

 private:
  std::vector<Entry> entries_;
};

/// metav1.ObjectMeta, the fields meshnode reads (anchors §C.3).
struct ObjectMeta {
  std::string name;
  std::string namespace_;         ///< empty for cluster-scoped objects (Namespace)
  std::string uid;
  std::string resource_version;   ///< opaque: compare for equality only, never order
  /// Set once deletion was requested (graceful termination in progress); seconds since the epoch.
  std::optional<std::chrono::sys_seconds> deletion_timestamp;
  StringMap labels;
  StringMap annotations;
  friend bool operator==(const ObjectMeta&, const ObjectMeta&) = default;
};

/// core/v1 Pod, the fields a node agent reads (anchors §C.4).
struct Pod {
  ObjectMeta metadata;
  std::string service_account_name;  ///< spec.serviceAccountName; "" means "default" to the API
  std::string node_name;             ///< spec.nodeName; "" while unscheduled
  bool host_network = false;         ///< spec.hostNetwork
  std::string phase;                 ///< status.phase: Pending|Running|Succeeded|Failed|Unknown
  /// status.podIPs in order (the first is status.podIP); status.podIP alone when podIPs is absent.
  std::vector<std::string> pod_ips;
  friend bool operator==(const Pod&, const Pod&) = default;
};

/// core/v1 Namespace, the fields meshnode reads.
struct Namespace {
  ObjectMeta metadata;
  std::string phase;  ///< status.phase: Active|Terminating
  friend bool operator==(const Namespace&, const Namespace&) = default;
};

/// metav1.Status: the body of an API error, and the object of a watch ERROR event.
struct Status {
  std::string status;   ///< "Success" | "Failure"
  std::string message;  ///< human text, e.g. "too old resource version: 10 (20)"
  std::string reason;   ///< machine reason, e.g. "Expired", "Gone", "NotFound"
  int code = 0;         ///< HTTP status code it stands for, e.g. 410
  friend bool operator==(const Status&, const Status&) = default;
};

/// True for the Status the API uses to say a resourceVersion or continue token is older than its
/// history (HTTP 410, reason Expired or Gone; anchors §C.3): the client must list again.
[[nodiscard]] bool is_expired(const Status& status);

/// metav1.ListMeta.
struct ListMeta {
  std::string resource_version;  ///< the list's consistent point; watch from here
  std::string continue_token;    ///< non-empty when more pages follow
  std::optional<std::int64_t> remaining_item_count;
};

/// One page of a list response. `skipped` counts items that could not be decoded (each one logged
/// by the decoder and left out of `items`).
template <class T>
struct List {
  ListMeta metadata;
  std::vector<T> items;
  std::size_t skipped = 0;
};

/// Watch event types (apimachinery pkg/watch/watch.go).
enum class EventType { kAdded, kModified, kDeleted, kBookmark, kError };

/// "ADDED", "MODIFIED", ... as on the wire.
[[nodiscard]] std::string_view to_string(EventType type) noexcept;

/// One decoded watch event. `object` is meaningful for ADDED/MODIFIED/DELETED (DELETED carries the
/// last state); for BOOKMARK only `object.metadata.resource_version` is set; for ERROR `status`.
template <class T>
struct WatchEvent {
  EventType type = EventType::kAdded;
  T object;
  Status status;
};

/// "namespace/name" (or "name" for cluster-scoped objects): the key client-go's caches use too.
[[nodiscard]] std::string object_key(const ObjectMeta& meta);

}  // namespace meshnode::kube
