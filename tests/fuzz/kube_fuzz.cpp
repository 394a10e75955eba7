// libFuzzer target for Kubernetes API decoding (kube/ codecs; apimachinery protobuf envelope and
// watch framing, anchors §C): every list, object, Status and watch stream the agent receives from
// the API server goes through these decoders, and one bad object must never cost the agent its
// cache. Checks beyond "no crash":
// - decoded objects keep the documented promises: metadata.name and metadata.uid non-empty,
//   labels/annotations sorted with unique keys; list `skipped` counts what was left out;
// - watch framing does not depend on how the stream was cut into reads: the frames, the error and
//   what stays buffered are the same fed whole or in pieces, and no frame exceeds the limit.
//
// Input: byte 0 = bit 0 encoding (0 protobuf, 1 JSON), bits 1-3 what the body is: 0 PodList,
// 1 NamespaceList, 2 Pod, 3 Namespace, 4 Status, 5 one Pod watch event, 6 a watch stream of Pod
// events, 7 one Namespace watch event. The rest is the body as the API server sends it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "kube/codec.hpp"

namespace {

namespace kube = meshnode::kube;

/// Small enough that fuzzed lengths reach it.
constexpr std::size_t kMaxFrame = 2048;

void check_map(const kube::StringMap& map) {
  const auto& e = map.entries();
  for (std::size_t i = 1; i < e.size(); ++i) FUZZ_CHECK(e[i - 1].first < e[i].first, "map keys not sorted unique");
}

void check_meta(const kube::ObjectMeta& meta) {
  FUZZ_CHECK(!meta.name.empty() && !meta.uid.empty(), "object without name or uid");
  check_map(meta.labels);
  check_map(meta.annotations);
}

template <class T>
void check_event(const kube::WatchEvent<T>& event) {
  if (event.type == kube::EventType::kAdded || event.type == kube::EventType::kModified ||
      event.type == kube::EventType::kDeleted)
    check_meta(event.object.metadata);
}

struct Framed {
  std::vector<std::string> frames;
  std::string error;  // empty: none
  std::size_t buffered = 0;
};

/// Feeds `stream` in pieces whose sizes come from the stream itself (0 = all at once), collecting
/// frames until more bytes are needed or an error ends the stream.
Framed frame(kube::Encoding encoding, std::string_view stream, bool pieces) {
  kube::WatchFramer framer(encoding, kMaxFrame);
  Framed out;
  std::size_t at = 0;
  unsigned step = 0;
  while (at < stream.size() && out.error.empty()) {
    const std::size_t n =
        pieces ? std::min<std::size_t>(stream.size() - at, 1 + static_cast<unsigned char>(stream[step++ % stream.size()]) % 97)
               : stream.size();
    framer.feed(stream.substr(at, n));
    at += n;
    while (true) {
      auto next = framer.next();
      if (!next) {
        out.error = next.error().context;
        break;
      }
      if (!*next) break;
      FUZZ_CHECK((*next)->size() <= kMaxFrame, "a frame over the limit");
      out.frames.emplace_back(**next);
    }
  }
  out.buffered = out.error.empty() ? framer.buffered() : 0;
  return out;
}

void check_stream(kube::Encoding encoding, std::string_view stream) {
  const Framed whole = frame(encoding, stream, false);
  const Framed cut = frame(encoding, stream, true);
  FUZZ_CHECK(whole.error.empty() == cut.error.empty(), "an error depends on how the stream was cut");
  if (whole.error.empty()) {
    FUZZ_CHECK(whole.frames == cut.frames && whole.buffered == cut.buffered, "frames depend on the cut");
  }
  for (const auto& f : whole.frames) {
    if (auto event = kube::decode_watch_event<kube::Pod>(encoding, f)) check_event(*event);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto encoding = (data[0] & 1) != 0 ? kube::Encoding::kJson : kube::Encoding::kProtobuf;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch ((data[0] >> 1) & 7) {
    case 0:
      if (auto list = kube::decode_list<kube::Pod>(encoding, body))
        for (const auto& pod : list->items) check_meta(pod.metadata);
      break;
    case 1:
      if (auto list = kube::decode_list<kube::Namespace>(encoding, body))
        for (const auto& ns : list->items) check_meta(ns.metadata);
      break;
    case 2:
      if (auto pod = kube::decode_object<kube::Pod>(encoding, body)) check_meta(pod->metadata);
      break;
    case 3:
      if (auto ns = kube::decode_object<kube::Namespace>(encoding, body)) check_meta(ns->metadata);
      break;
    case 4:
      (void)kube::decode_status(encoding, body);
      break;
    case 5:
      if (auto event = kube::decode_watch_event<kube::Pod>(encoding, body)) check_event(*event);
      break;
    case 6:
      check_stream(encoding, body);
      break;
    default:
      if (auto event = kube::decode_watch_event<kube::Namespace>(encoding, body)) check_event(*event);
      break;
  }
  return 0;
}
