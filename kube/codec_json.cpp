// Kubernetes JSON encoding, as the API server writes it: lists are {"kind":"PodList",
// "metadata":{..},"items":[..]} (items carry no kind), watch events are one
// {"type":..,"object":{..}} document per line, errors are {"kind":"Status",..}.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "kube/codec.hpp"
#include "kube/codec_detail.hpp"

namespace meshnode::kube::detail::json {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using nlohmann::json;

Result<json> parse(std::string_view body) {
  if (body.empty()) return fail(Errc::kProtocol, "json: empty body");
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail(Errc::kProtocol, "json: syntax error in body");
  if (!doc.is_object()) return fail(Errc::kProtocol, "json: body is not an object");
  return doc;
}

/// The string member `key` of `obj`, "" when absent or null; throws type_error when mistyped
/// (caught per object by `convert`).
std::string str(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  return it->get<std::string>();
}

const json& member(const json& obj, const char* key) {
  static const json kEmpty = json::object();
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return kEmpty;
  if (!it->is_object()) throw std::invalid_argument(std::string(key) + " is not an object");
  return *it;
}

/// RFC 3339 as metav1.Time marshals it ("2024-05-01T10:00:00Z", offsets and fractions accepted).
std::chrono::sys_seconds parse_time(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &consumed) != 6) {
    throw std::invalid_argument("bad timestamp \"" + text + "\"");
  }
  std::string_view rest(text.c_str() + consumed);
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') rest.remove_prefix(1);
  }
  int offset_seconds = 0;
  if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    const int oh = (rest[1] - '0') * 10 + (rest[2] - '0');
    const int om = (rest[4] - '0') * 10 + (rest[5] - '0');
    offset_seconds = (rest[0] == '-' ? -1 : 1) * (oh * 3600 + om * 60);
  } else if (rest != "Z" && rest != "z") {
    throw std::invalid_argument("bad timestamp \"" + text + "\"");
  }
  const std::chrono::year_month_day ymd{std::chrono::year(y), std::chrono::month(static_cast<unsigned>(mo)),
                                        std::chrono::day(static_cast<unsigned>(d))};
  if (!ymd.ok()) throw std::invalid_argument("bad date \"" + text + "\"");
  return std::chrono::sys_days(ymd) + std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(s) -
         std::chrono::seconds(offset_seconds);
}

StringMap string_map(const json& obj, const char* key) {
  const json& m = member(obj, key);
  std::vector<StringMap::Entry> entries;
  entries.reserve(m.size());
  for (auto it = m.begin(); it != m.end(); ++it) entries.emplace_back(it.key(), it.value().get<std::string>());
  return StringMap(std::move(entries));
}

void fill_meta(const json& obj, ObjectMeta& out) {
  const json& m = member(obj, "metadata");
  out.name = str(m, "name");
  out.namespace_ = str(m, "namespace");
  out.uid = str(m, "uid");
  out.resource_version = str(m, "resourceVersion");
  out.deletion_timestamp.reset();
  if (auto ts = str(m, "deletionTimestamp"); !ts.empty()) out.deletion_timestamp = parse_time(ts);
  out.labels = string_map(m, "labels");
  out.annotations = string_map(m, "annotations");
}

void to_domain(const json& obj, Pod& out) {
  fill_meta(obj, out.metadata);
  const json& spec = member(obj, "spec");
  out.service_account_name = str(spec, "serviceAccountName");
  if (out.service_account_name.empty()) out.service_account_name = str(spec, "serviceAccount");  // deprecated alias
  out.node_name = str(spec, "nodeName");
  auto host_network = spec.find("hostNetwork");
  out.host_network = host_network != spec.end() && !host_network->is_null() && host_network->get<bool>();
  const json& status = member(obj, "status");
  out.phase = str(status, "phase");
  out.pod_ips.clear();
  if (auto ips = status.find("podIPs"); ips != status.end() && !ips->is_null()) {
    for (const auto& ip : *ips) out.pod_ips.push_back(str(ip, "ip"));
  }
  if (out.pod_ips.empty()) {
    if (auto ip = str(status, "podIP"); !ip.empty()) out.pod_ips.push_back(std::move(ip));
  }
}

void to_domain(const json& obj, Namespace& out) {
  fill_meta(obj, out.metadata);
  out.phase = str(member(obj, "status"), "phase");
}

/// Converts one object, turning a mistyped member into an error naming it.
template <class T>
Result<void> convert(const json& obj, T& out, bool need_identity) {
  if (!obj.is_object()) return fail(Errc::kProtocol, "json: " + std::string(KindOf<T>::kind) + " is not an object");
  try {
    to_domain(obj, out);
  } catch (const std::exception& e) {
    return fail(Errc::kProtocol, "json: bad " + std::string(KindOf<T>::kind) + ": " + e.what());
  }
  if (need_identity) return check_identity(out.metadata, KindOf<T>::kind);
  return {};
}

/// True when `doc` has a string member "kind" equal to `kind` (json::value would throw on a mistyped one).
bool kind_equals(const json& doc, std::string_view kind) {
  auto it = doc.find("kind");
  return it != doc.end() && it->is_string() && it->get_ref<const std::string&>() == kind;
}

Result<Status> status_of(const json& obj) {
  if (!obj.is_object() || !kind_equals(obj, "Status")) return fail(Errc::kProtocol, "json: not a Status");
  try {
    Status status;
    status.status = str(obj, "status");
    status.message = str(obj, "message");
    status.reason = str(obj, "reason");
    if (auto code = obj.find("code"); code != obj.end() && code->is_number_integer()) status.code = code->get<int>();
    return status;
  } catch (const std::exception& e) {
    return fail(Errc::kProtocol, std::string("json: bad Status: ") + e.what());
  }
}

std::unexpected<base::Error> wrong_kind(const json& doc, std::string_view expected) {
  if (auto status = status_of(doc)) return fail(Errc::kProtocol, "the API answered " + describe(*status));
  const auto kind = doc.contains("kind") && doc["kind"].is_string() ? doc["kind"].get<std::string>() : std::string();
  return fail(Errc::kProtocol, "json: expected kind " + std::string(expected) + ", got \"" + kind + "\"");
}

/// An absent kind is accepted (the object's shape then decides); a different one is not.
bool kind_is(const json& doc, std::string_view kind) {
  auto it = doc.find("kind");
  return it == doc.end() || (it->is_string() && it->get_ref<const std::string&>() == kind);
}

}  // namespace

template <class T>
Result<List<T>> decode_list(std::string_view body) {
  auto doc = parse(body);
  if (!doc) return std::unexpected(doc.error());
  if (!kind_is(*doc, KindOf<T>::list_kind)) return wrong_kind(*doc, KindOf<T>::list_kind);
  List<T> list;
  try {
    const json& meta = member(*doc, "metadata");
    list.metadata.resource_version = str(meta, "resourceVersion");
    list.metadata.continue_token = str(meta, "continue");
    if (auto n = meta.find("remainingItemCount"); n != meta.end() && n->is_number_integer()) {
      list.metadata.remaining_item_count = n->get<std::int64_t>();
    }
  } catch (const std::exception& e) {
    return fail(Errc::kProtocol, std::string("json: bad list metadata: ") + e.what());
  }
  auto items = doc->find("items");
  if (items == doc->end() || items->is_null()) return list;
  if (!items->is_array()) return fail(Errc::kProtocol, "json: items is not an array");
  list.items.reserve(items->size());
  for (std::size_t i = 0; i < items->size(); ++i) {
    T item;
    if (auto converted = convert((*items)[i], item, true); !converted) {
      ++list.skipped;
      spdlog::warn("kube: skipped {} item={} reason=\"{}\"", KindOf<T>::list_kind, i, converted.error().context);
      continue;
    }
    list.items.push_back(std::move(item));
  }
  return list;
}

template <class T>
Result<T> decode_object(std::string_view body) {
  auto doc = parse(body);
  if (!doc) return std::unexpected(doc.error());
  if (!kind_is(*doc, KindOf<T>::kind)) return wrong_kind(*doc, KindOf<T>::kind);
  T out;
  if (auto converted = convert(*doc, out, true); !converted) return std::unexpected(converted.error());
  return out;
}

Result<Status> decode_status(std::string_view body) {
  auto doc = parse(body);
  if (!doc) return std::unexpected(doc.error());
  return status_of(*doc);
}

template <class T>
Result<WatchEvent<T>> decode_watch_event(std::string_view frame) {
  auto doc = parse(frame);
  if (!doc) return std::unexpected(doc.error());
  auto type_it = doc->find("type");
  if (type_it == doc->end() || !type_it->is_string()) return fail(Errc::kProtocol, "json: watch event without a type");
  auto type = parse_event_type(type_it->get_ref<const std::string&>());
  if (!type) return std::unexpected(type.error());
  auto object = doc->find("object");
  if (object == doc->end()) return fail(Errc::kProtocol, "json: watch event without an object");
  WatchEvent<T> event;
  event.type = *type;
  if (event.type == EventType::kError) {
    auto status = status_of(*object);
    if (!status) return fail(Errc::kProtocol, "json: ERROR event without a Status object");
    event.status = std::move(*status);
    return event;
  }
  if (!kind_is(*object, KindOf<T>::kind)) return wrong_kind(*object, KindOf<T>::kind);
  if (auto converted = convert(*object, event.object, false); !converted) return std::unexpected(converted.error());
  if (auto checked = check_event_object(event); !checked) return std::unexpected(checked.error());
  return event;
}

MESHNODE_KUBE_INSTANTIATE_CODEC

}  // namespace meshnode::kube::detail::json
