#pragma once
// Internal to kube/: the per-encoding halves of codec.hpp. Same contracts as there.

#include <string_view>

#include "base/error.hpp"
#include "kube/types.hpp"

namespace meshnode::kube::detail {

/// Names a kind expects in envelopes and messages: "Pod"/"PodList", "Namespace"/"NamespaceList".
template <class T>
struct KindOf;
template <>
struct KindOf<Pod> {
  static constexpr std::string_view kind = "Pod";
  static constexpr std::string_view list_kind = "PodList";
};
template <>
struct KindOf<Namespace> {
  static constexpr std::string_view kind = "Namespace";
  static constexpr std::string_view list_kind = "NamespaceList";
};

/// Errc::kProtocol unless the object can be cached: name and uid must be set.
[[nodiscard]] base::Result<void> check_identity(const ObjectMeta& meta, std::string_view kind);

/// The object of a decoded ADDED/MODIFIED/DELETED event needs name and uid; a BOOKMARK's only its
/// resourceVersion (anchors §C.2). Errc::kProtocol otherwise.
template <class T>
[[nodiscard]] base::Result<void> check_event_object(const WatchEvent<T>& event) {
  if (event.type != EventType::kBookmark) return check_identity(event.object.metadata, KindOf<T>::kind);
  if (event.object.metadata.resource_version.empty()) {
    return base::fail(base::Errc::kProtocol, "BOOKMARK without metadata.resourceVersion");
  }
  return {};
}

/// Parses the EventType as it stands on the wire ("ADDED", ...); kProtocol otherwise.
[[nodiscard]] base::Result<EventType> parse_event_type(std::string_view type);

/// "Status 410 Expired: too old resource version: 1 (5)" for error messages.
[[nodiscard]] std::string describe(const Status& status);

// The same four functions per encoding, declared once here and instantiated for Pod and
// Namespace at the end of codec_protobuf.cpp / codec_json.cpp.
#define MESHNODE_KUBE_CODEC_FUNCTIONS                              \
  template <class T>                                               \
  base::Result<List<T>> decode_list(std::string_view body);        \
  template <class T>                                               \
  base::Result<T> decode_object(std::string_view body);            \
  base::Result<Status> decode_status(std::string_view body);       \
  template <class T>                                               \
  base::Result<WatchEvent<T>> decode_watch_event(std::string_view frame);

#define MESHNODE_KUBE_INSTANTIATE_CODEC                                              \
  template base::Result<List<Pod>> decode_list<Pod>(std::string_view);               \
  template base::Result<List<Namespace>> decode_list<Namespace>(std::string_view);   \
  template base::Result<Pod> decode_object<Pod>(std::string_view);                   \
  template base::Result<Namespace> decode_object<Namespace>(std::string_view);       \
  template base::Result<WatchEvent<Pod>> decode_watch_event<Pod>(std::string_view);  \
  template base::Result<WatchEvent<Namespace>> decode_watch_event<Namespace>(std::string_view);

namespace pb {
MESHNODE_KUBE_CODEC_FUNCTIONS
}  // namespace pb

namespace json {
MESHNODE_KUBE_CODEC_FUNCTIONS
}  // namespace json

}  // namespace meshnode::kube::detail
