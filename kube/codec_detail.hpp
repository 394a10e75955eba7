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

/// Parses the EventType as it stands on the wire ("ADDED", ...); kProtocol otherwise.
[[nodiscard]] base::Result<EventType> parse_event_type(std::string_view type);

/// "Status 410 Expired: too old resource version: 1 (5)" for error messages.
[[nodiscard]] std::string describe(const Status& status);

namespace pb {
template <class T>
base::Result<List<T>> decode_list(std::string_view body);
template <class T>
base::Result<T> decode_object(std::string_view body);
base::Result<Status> decode_status(std::string_view body);
template <class T>
base::Result<WatchEvent<T>> decode_watch_event(std::string_view frame);
}  // namespace pb

namespace json {
template <class T>
base::Result<List<T>> decode_list(std::string_view body);
template <class T>
base::Result<T> decode_object(std::string_view body);
base::Result<Status> decode_status(std::string_view body);
template <class T>
base::Result<WatchEvent<T>> decode_watch_event(std::string_view frame);
}  // namespace json

}  // namespace meshnode::kube::detail
