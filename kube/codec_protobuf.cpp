// Kubernetes protobuf encoding (anchors §C.1-C.2): "k8s\0" + runtime.Unknown{typeMeta, raw};
// watch frames are raw WatchEvents whose object.raw is again a whole enveloped object.
// Envelopes are walked with wire::Reader (views, no copies); objects are parsed by the generated
// lite classes, which skip every field our .proto subset leaves out.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "k8s_core.pb.h"
#include "k8s_meta.pb.h"
#include "kube/codec.hpp"
#include "kube/codec_detail.hpp"
#include "kube/wire.hpp"

namespace meshnode::kube::detail::pb {
namespace {

namespace v1 = k8s::io::api::core::v1;
namespace metav1 = k8s::io::apimachinery::pkg::apis::meta::v1;
using base::Errc;
using base::fail;
using base::Result;

struct Envelope {
  std::string_view api_version;
  std::string_view kind;
  std::string_view raw;
};

std::string hex_prefix(std::string_view body) {
  std::string out;
  for (std::size_t i = 0; i < body.size() && i < 4; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(body[i]));
    if (!out.empty()) out += ' ';
    out += buf;
  }
  return out;
}

Result<void> parse_type_meta(std::string_view bytes, Envelope& env) {
  return wire::visit(bytes, [&](const wire::Field& f) {
    if (f.wire_type != 2) return;
    if (f.number == 1) env.api_version = f.bytes;
    if (f.number == 2) env.kind = f.bytes;
  });
}

/// Checks the magic prefix and walks runtime.Unknown.
Result<Envelope> unwrap(std::string_view body) {
  if (body.empty()) return fail(Errc::kProtocol, "protobuf: empty data");
  if (body.size() < kProtobufPrefix.size() || body.substr(0, kProtobufPrefix.size()) != kProtobufPrefix) {
    return fail(Errc::kProtocol, "protobuf: body starts with " + hex_prefix(body) +
                                     ", not the k8s\\0 prefix: does not appear to be a protobuf message");
  }
  if (body.size() == kProtobufPrefix.size()) return fail(Errc::kProtocol, "protobuf: empty body after the k8s\\0 prefix");
  Envelope env;
  std::string_view content_encoding;
  std::string_view content_type;
  std::string_view type_meta;
  auto walked = wire::visit(body.substr(kProtobufPrefix.size()), [&](const wire::Field& f) {
    if (f.wire_type != 2) return;
    if (f.number == 1) type_meta = f.bytes;
    if (f.number == 2) env.raw = f.bytes;
    if (f.number == 3) content_encoding = f.bytes;
    if (f.number == 4) content_type = f.bytes;
  });
  if (!walked) return fail(Errc::kProtocol, "runtime.Unknown: " + walked.error().context);
  if (auto tm = parse_type_meta(type_meta, env); !tm) return fail(Errc::kProtocol, "runtime.TypeMeta: " + tm.error().context);
  if (!content_encoding.empty()) {
    return fail(Errc::kProtocol, "runtime.Unknown: unsupported contentEncoding " + std::string(content_encoding));
  }
  if (!content_type.empty() && content_type != kProtobufMediaType) {
    return fail(Errc::kProtocol, "runtime.Unknown: raw is " + std::string(content_type) + ", not protobuf");
  }
  return env;
}

Status to_domain(const metav1::Status& m) {
  return Status{m.status(), m.message(), m.reason(), m.code()};
}

Result<Status> status_of(std::string_view raw) {
  metav1::Status m;
  if (!m.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) {
    return fail(Errc::kProtocol, "protobuf: cannot parse metav1.Status");
  }
  return to_domain(m);
}

/// Error for an envelope of the wrong kind: a Status says why the server refused.
std::unexpected<base::Error> wrong_kind(const Envelope& env, std::string_view expected) {
  if (env.kind == "Status") {
    if (auto status = status_of(env.raw)) return fail(Errc::kProtocol, "the API answered " + describe(*status));
  }
  return fail(Errc::kProtocol, "protobuf: expected kind " + std::string(expected) + ", got \"" + std::string(env.kind) + "\"");
}

void fill_meta(const metav1::ObjectMeta& m, ObjectMeta& out) {
  out.name = m.name();
  out.namespace_ = m.namespace_();
  out.uid = m.uid();
  out.resource_version = m.resourceversion();
  out.deletion_timestamp.reset();
  if (m.has_deletiontimestamp()) {
    out.deletion_timestamp = std::chrono::sys_seconds(std::chrono::seconds(m.deletiontimestamp().seconds()));
  }
  std::vector<StringMap::Entry> labels(m.labels().begin(), m.labels().end());
  out.labels = StringMap(std::move(labels));
  std::vector<StringMap::Entry> annotations(m.annotations().begin(), m.annotations().end());
  out.annotations = StringMap(std::move(annotations));
}

void to_domain(const v1::Pod& m, Pod& out) {
  fill_meta(m.metadata(), out.metadata);
  out.service_account_name = m.spec().serviceaccountname();
  out.node_name = m.spec().nodename();
  out.host_network = m.spec().hostnetwork();
  out.phase = m.status().phase();
  out.pod_ips.clear();
  for (const auto& ip : m.status().podips()) out.pod_ips.push_back(ip.ip());
  if (out.pod_ips.empty() && !m.status().podip().empty()) out.pod_ips.push_back(m.status().podip());
}

void to_domain(const v1::Namespace& m, Namespace& out) {
  fill_meta(m.metadata(), out.metadata);
  out.phase = m.status().phase();
}

template <class T>
struct MessageOf;
template <>
struct MessageOf<Pod> {
  using type = v1::Pod;
};
template <>
struct MessageOf<Namespace> {
  using type = v1::Namespace;
};

/// Parses one object body (no envelope) into `out`, reusing `scratch`'s allocations.
template <class T>
Result<void> parse_object(std::string_view raw, typename MessageOf<T>::type& scratch, T& out, bool need_identity) {
  scratch.Clear();
  if (!scratch.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) {
    return fail(Errc::kProtocol, "protobuf: cannot parse " + std::string(KindOf<T>::kind));
  }
  to_domain(scratch, out);
  if (need_identity) return check_identity(out.metadata, KindOf<T>::kind);
  return {};
}

}  // namespace

template <class T>
Result<List<T>> decode_list(std::string_view body) {
  auto env = unwrap(body);
  if (!env) return std::unexpected(env.error());
  if (env->kind != KindOf<T>::list_kind) return wrong_kind(*env, KindOf<T>::list_kind);
  List<T> list;
  typename MessageOf<T>::type scratch;
  std::size_t index = 0;
  bool bad_meta = false;
  auto walked = wire::visit(env->raw, [&](const wire::Field& f) {
    if (f.wire_type != 2) return;
    if (f.number == 1) {
      metav1::ListMeta meta;
      bad_meta = !meta.ParseFromArray(f.bytes.data(), static_cast<int>(f.bytes.size()));
      list.metadata.resource_version = meta.resourceversion();
      list.metadata.continue_token = meta.continue_();
      if (meta.has_remainingitemcount()) list.metadata.remaining_item_count = meta.remainingitemcount();
    } else if (f.number == 2) {
      T item;
      if (auto parsed = parse_object<T>(f.bytes, scratch, item, true); !parsed) {
        ++list.skipped;
        spdlog::warn("kube: skipped {} item={} reason=\"{}\"", KindOf<T>::list_kind, index, parsed.error().context);
      } else {
        list.items.push_back(std::move(item));
      }
      ++index;
    }
  });
  if (!walked) return fail(Errc::kProtocol, std::string(KindOf<T>::list_kind) + ": " + walked.error().context);
  if (bad_meta) return fail(Errc::kProtocol, std::string(KindOf<T>::list_kind) + ": cannot parse metadata");
  return list;
}

template <class T>
Result<T> decode_object(std::string_view body) {
  auto env = unwrap(body);
  if (!env) return std::unexpected(env.error());
  if (env->kind != KindOf<T>::kind) return wrong_kind(*env, KindOf<T>::kind);
  typename MessageOf<T>::type scratch;
  T out;
  if (auto parsed = parse_object<T>(env->raw, scratch, out, true); !parsed) return std::unexpected(parsed.error());
  return out;
}

Result<Status> decode_status(std::string_view body) {
  auto env = unwrap(body);
  if (!env) return std::unexpected(env.error());
  if (env->kind != "Status") {
    return fail(Errc::kProtocol, "protobuf: expected kind Status, got \"" + std::string(env->kind) + "\"");
  }
  return status_of(env->raw);
}

template <class T>
Result<WatchEvent<T>> decode_watch_event(std::string_view frame) {
  std::string_view type;
  std::string_view raw_extension;
  auto walked = wire::visit(frame, [&](const wire::Field& f) {
    if (f.wire_type != 2) return;
    if (f.number == 1) type = f.bytes;
    if (f.number == 2) raw_extension = f.bytes;
  });
  if (!walked) return fail(Errc::kProtocol, "WatchEvent: " + walked.error().context);
  auto event_type = parse_event_type(type);
  if (!event_type) return std::unexpected(event_type.error());
  std::string_view object;
  walked = wire::visit(raw_extension, [&](const wire::Field& f) {
    if (f.number == 1 && f.wire_type == 2) object = f.bytes;
  });
  if (!walked) return fail(Errc::kProtocol, "WatchEvent.object: " + walked.error().context);
  auto env = unwrap(object);
  if (!env) return fail(Errc::kProtocol, "WatchEvent " + std::string(type) + " object: " + env.error().context);
  WatchEvent<T> event;
  event.type = *event_type;
  if (event.type == EventType::kError) {
    if (env->kind != "Status") return fail(Errc::kProtocol, "WatchEvent ERROR without a Status object");
    auto status = status_of(env->raw);
    if (!status) return std::unexpected(status.error());
    event.status = std::move(*status);
    return event;
  }
  if (env->kind != KindOf<T>::kind) return wrong_kind(*env, KindOf<T>::kind);
  // One parse buffer per thread: watch events arrive one at a time on each informer thread, and
  // reusing the message keeps its string and map allocations warm.
  thread_local typename MessageOf<T>::type scratch;
  if (auto parsed = parse_object<T>(env->raw, scratch, event.object, false); !parsed) return std::unexpected(parsed.error());
  if (auto checked = check_event_object(event); !checked) return std::unexpected(checked.error());
  return event;
}

MESHNODE_KUBE_INSTANTIATE_CODEC

}  // namespace meshnode::kube::detail::pb
