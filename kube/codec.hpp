#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "kube/types.hpp"

namespace meshnode::kube {

/// The two encodings the API server speaks for core types (anchors §C; api-concepts.md).
enum class Encoding { kProtobuf, kJson };

/// Media types, as sent in Accept / Content-Type.
inline constexpr std::string_view kProtobufMediaType = "application/vnd.kubernetes.protobuf";
inline constexpr std::string_view kJsonMediaType = "application/json";
inline constexpr std::string_view kMergePatchMediaType = "application/merge-patch+json";

/// "protobuf" | "json".
[[nodiscard]] std::string_view to_string(Encoding encoding) noexcept;

/// The encoding of a response from its Content-Type header (parameters such as
/// ";stream=watch" and ";charset=utf-8" ignored). Errc::kProtocol naming the type otherwise.
[[nodiscard]] base::Result<Encoding> encoding_of(std::string_view content_type);

/// The 4 bytes every protobuf body and every object embedded in a protobuf watch event starts
/// with: "k8s" + encoding style 0 (apimachinery serializer/protobuf `protoEncodingPrefix`).
inline constexpr std::string_view kProtobufPrefix{"k8s\0", 4};

/// Decodes a whole list response (PodList, NamespaceList) of encoding `encoding`.
/// Items that fail to decode are skipped, counted in `List::skipped` and logged (warn).
/// @returns Errc::kProtocol when the envelope itself is broken: empty body, wrong or missing
///          "k8s\0" prefix, truncated protobuf, JSON syntax error, the wrong kind (a Status body
///          yields its message), an unsupported contentEncoding.
/// Instantiated for Pod and Namespace. Pure; any thread.
template <class T>
[[nodiscard]] base::Result<List<T>> decode_list(Encoding encoding, std::string_view body);

/// Decodes one object response (GET, PATCH reply). Errc::kProtocol as for decode_list, or when the
/// object lacks metadata.name / metadata.uid. Instantiated for Pod and Namespace. Pure.
template <class T>
[[nodiscard]] base::Result<T> decode_object(Encoding encoding, std::string_view body);

/// Decodes a metav1.Status body (what the API sends with 4xx/5xx). Errc::kProtocol if the body is
/// not a Status. Pure.
[[nodiscard]] base::Result<Status> decode_status(Encoding encoding, std::string_view body);

/// Decodes one watch event frame: for protobuf a raw metav1.WatchEvent (no prefix) whose
/// object.raw is a whole enveloped object; for JSON one {"type":..,"object":..} document
/// (anchors §C.2). BOOKMARK needs only metadata.resourceVersion; ERROR carries a Status.
/// @returns Errc::kProtocol naming what was wrong (unknown type, bad envelope, object without
///          name/uid); the caller skips such an event and counts it, the stream stays usable.
/// Instantiated for Pod and Namespace. Pure.
template <class T>
[[nodiscard]] base::Result<WatchEvent<T>> decode_watch_event(Encoding encoding, std::string_view frame);

/// Splits the body of a watch response into event frames as bytes arrive: protobuf frames are a
/// 4-byte big-endian length + body (apimachinery util/framer); JSON events are one document per
/// line. Not thread-safe (one per stream).
class WatchFramer {
 public:
  /// `max_frame_bytes` bounds one event (an etcd object is at most ~1.5 MiB; default 16 MiB).
  explicit WatchFramer(Encoding encoding, std::size_t max_frame_bytes = 16u << 20);

  /// Appends received bytes.
  void feed(std::string_view bytes);

  /// The next whole frame (valid until the next call of feed/next), or nullopt when more bytes are
  /// needed. Errc::kProtocol when a length exceeds `max_frame_bytes` (or a JSON line grows past
  /// it): the stream cannot be resynchronised and must be dropped.
  [[nodiscard]] base::Result<std::optional<std::string_view>> next();

  /// At end of stream: Errc::kProtocol "truncated frame" when part of a frame is left over.
  [[nodiscard]] base::Result<void> finish() const;

  /// Bytes received and not yet returned as frames.
  [[nodiscard]] std::size_t buffered() const noexcept { return buffer_.size() - start_; }

 private:
  void compact();
  Encoding encoding_;
  std::size_t max_frame_bytes_;
  std::string buffer_;
  std::size_t start_ = 0;  // first byte not yet returned
  std::size_t scanned_ = 0;  // JSON: bytes after start_ already known to hold no newline
};

}  // namespace meshnode::kube
