#include "kube/codec.hpp"

#include <cstring>

#include "kube/codec_detail.hpp"

namespace meshnode::kube {
namespace detail {

base::Result<void> check_identity(const ObjectMeta& meta, std::string_view kind) {
  if (meta.name.empty()) return base::fail(base::Errc::kProtocol, std::string(kind) + " without metadata.name");
  if (meta.uid.empty()) {
    return base::fail(base::Errc::kProtocol, std::string(kind) + " " + object_key(meta) + " without metadata.uid");
  }
  return {};
}

base::Result<EventType> parse_event_type(std::string_view type) {
  if (type == "ADDED") return EventType::kAdded;
  if (type == "MODIFIED") return EventType::kModified;
  if (type == "DELETED") return EventType::kDeleted;
  if (type == "BOOKMARK") return EventType::kBookmark;
  if (type == "ERROR") return EventType::kError;
  return base::fail(base::Errc::kProtocol, "watch event of unknown type \"" + std::string(type.substr(0, 32)) + "\"");
}

std::string describe(const Status& status) {
  std::string out = "Status " + std::to_string(status.code);
  if (!status.reason.empty()) out += " " + status.reason;
  if (!status.message.empty()) out += ": " + status.message;
  return out;
}

}  // namespace detail

std::string_view to_string(Encoding encoding) noexcept {
  return encoding == Encoding::kProtobuf ? "protobuf" : "json";
}

base::Result<Encoding> encoding_of(std::string_view content_type) {
  auto media = content_type.substr(0, content_type.find(';'));
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  if (media == kProtobufMediaType) return Encoding::kProtobuf;
  if (media == kJsonMediaType) return Encoding::kJson;
  return base::fail(base::Errc::kProtocol, "unexpected Content-Type \"" + std::string(content_type.substr(0, 80)) + "\"");
}

template <class T>
base::Result<List<T>> decode_list(Encoding encoding, std::string_view body) {
  return encoding == Encoding::kProtobuf ? detail::pb::decode_list<T>(body) : detail::json::decode_list<T>(body);
}

template <class T>
base::Result<T> decode_object(Encoding encoding, std::string_view body) {
  return encoding == Encoding::kProtobuf ? detail::pb::decode_object<T>(body) : detail::json::decode_object<T>(body);
}

base::Result<Status> decode_status(Encoding encoding, std::string_view body) {
  return encoding == Encoding::kProtobuf ? detail::pb::decode_status(body) : detail::json::decode_status(body);
}

template <class T>
base::Result<WatchEvent<T>> decode_watch_event(Encoding encoding, std::string_view frame) {
  return encoding == Encoding::kProtobuf ? detail::pb::decode_watch_event<T>(frame)
                                         : detail::json::decode_watch_event<T>(frame);
}

template base::Result<List<Pod>> decode_list<Pod>(Encoding, std::string_view);
template base::Result<List<Namespace>> decode_list<Namespace>(Encoding, std::string_view);
template base::Result<Pod> decode_object<Pod>(Encoding, std::string_view);
template base::Result<Namespace> decode_object<Namespace>(Encoding, std::string_view);
template base::Result<WatchEvent<Pod>> decode_watch_event<Pod>(Encoding, std::string_view);
template base::Result<WatchEvent<Namespace>> decode_watch_event<Namespace>(Encoding, std::string_view);

WatchFramer::WatchFramer(Encoding encoding, std::size_t max_frame_bytes)
    : encoding_(encoding), max_frame_bytes_(max_frame_bytes) {}

void WatchFramer::feed(std::string_view bytes) {
  compact();
  buffer_.append(bytes);
}

void WatchFramer::compact() {
  // Drop consumed bytes once they dominate, so the buffer holds about one frame at a time.
  if (start_ > 0 && start_ >= buffer_.size() / 2) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
}

base::Result<std::optional<std::string_view>> WatchFramer::next() {
  const std::string_view pending = std::string_view(buffer_).substr(start_);
  if (encoding_ == Encoding::kProtobuf) {
    if (pending.size() < 4) return std::optional<std::string_view>{};
    const auto* p = reinterpret_cast<const unsigned char*>(pending.data());
    const std::size_t length = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
    if (length > max_frame_bytes_) {
      return base::fail(base::Errc::kProtocol, "watch frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                                                   std::to_string(max_frame_bytes_));
    }
    if (pending.size() - 4 < length) return std::optional<std::string_view>{};
    start_ += 4 + length;
    return std::optional<std::string_view>{pending.substr(4, length)};
  }
  // JSON: one document per line; blank lines (keep-alive newlines) are skipped.
  while (true) {
    const std::string_view rest = std::string_view(buffer_).substr(start_);
    const auto nl = rest.find('\n', scanned_);
    if (nl == std::string_view::npos) {
      scanned_ = rest.size();
      if (rest.size() > max_frame_bytes_) {
        return base::fail(base::Errc::kProtocol, "watch event line longer than " + std::to_string(max_frame_bytes_) + " bytes");
      }
      return std::optional<std::string_view>{};
    }
    auto line = rest.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > max_frame_bytes_) {
      return base::fail(base::Errc::kProtocol, "watch event line longer than " + std::to_string(max_frame_bytes_) + " bytes");
    }
    start_ += nl + 1;
    scanned_ = 0;
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    return std::optional<std::string_view>{line};
  }
}

base::Result<void> WatchFramer::finish() const {
  const auto left = buffered();
  if (left == 0) return {};
  if (encoding_ == Encoding::kJson) {
    const auto rest = std::string_view(buffer_).substr(start_);
    if (rest.find_first_not_of(" \t\r\n") == std::string_view::npos) return {};
  }
  return base::fail(base::Errc::kProtocol, "truncated watch frame: stream ended with " + std::to_string(left) +
                                               " bytes of an incomplete event");
}

}  // namespace meshnode::kube
