#include "kube/client.hpp"

#include <spdlog/spdlog.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "kube/codec_detail.hpp"

namespace meshnode::kube {
namespace {

using base::Errc;
using base::fail;
using base::Result;

template <class T>
struct Resource;
template <>
struct Resource<Pod> {
  static constexpr std::string_view plural = "pods";
};
template <>
struct Resource<Namespace> {
  static constexpr std::string_view plural = "namespaces";
};

void add_param(std::string& target, std::string_view name, std::string_view value) {
  if (value.empty()) return;
  target += target.find('?') == std::string::npos ? '?' : '&';
  target.append(name).append("=").append(url_escape(value));
}

/// The error for a non-2xx answer: the Status message when the body is one, else the body's start.
base::Error refusal(const std::string& what, const HttpResponse& response) {
  std::string detail;
  if (auto encoding = encoding_of(response.content_type)) {
    if (auto status = decode_status(*encoding, response.body)) detail = detail::describe(*status);
  }
  if (detail.empty()) detail = "HTTP " + std::to_string(response.status) + ": " + response.body.substr(0, 200);
  Errc code = Errc::kProtocol;
  if (response.status == 404) code = Errc::kNotFound;
  if (response.status == 401 || response.status == 403) code = Errc::kConfig;
  return base::Error{code, what + ": " + detail, std::error_code(response.status, http_category())};
}

}  // namespace

Client::Client(std::unique_ptr<HttpClient> http, Encoding encoding) : http_(std::move(http)), encoding_(encoding) {}

Result<std::unique_ptr<Client>> Client::create(ClusterConfig config, HttpOptions http, Encoding encoding) {
  auto transport = HttpClient::create(std::move(config), std::move(http));
  if (!transport) return std::unexpected(transport.error());
  return std::make_unique<Client>(std::move(*transport), encoding);
}

std::string Client::accept() const {
  return encoding_ == Encoding::kProtobuf
             ? "Accept: " + std::string(kProtobufMediaType) + ", " + std::string(kJsonMediaType)
             : "Accept: " + std::string(kJsonMediaType);
}

Result<HttpResponse> Client::exchange(HttpRequest request) {
  stats_.requests.fetch_add(1, std::memory_order_relaxed);
  const std::string what = request.method + " " + request.target;
  auto response = http_->request(request);
  if (!response) {
    stats_.request_errors.fetch_add(1, std::memory_order_relaxed);
    return std::unexpected(response.error());
  }
  if (response->status < 200 || response->status > 299) {
    stats_.request_errors.fetch_add(1, std::memory_order_relaxed);
    return std::unexpected(refusal(what, *response));
  }
  return response;
}

template <class T>
Result<List<T>> Client::list(const ListOptions& options) {
  HttpRequest request;
  request.target = "/api/v1/" + std::string(Resource<T>::plural);
  add_param(request.target, "labelSelector", options.label_selector);
  add_param(request.target, "fieldSelector", options.field_selector);
  if (options.limit > 0) add_param(request.target, "limit", std::to_string(options.limit));
  add_param(request.target, "continue", options.continue_token);
  // An explicit resourceVersion=0 matters ("any version"), so it is sent even though it is "0".
  add_param(request.target, "resourceVersion", options.resource_version);
  add_param(request.target, "resourceVersionMatch", options.resource_version_match);
  request.headers.push_back(accept());
  auto response = exchange(std::move(request));
  if (!response) return std::unexpected(response.error());
  auto encoding = encoding_of(response->content_type);
  if (!encoding) return std::unexpected(encoding.error());
  auto list = decode_list<T>(*encoding, response->body);
  if (list) stats_.bad_objects.fetch_add(list->skipped, std::memory_order_relaxed);
  return list;
}

template <class T>
Result<T> Client::get(std::string_view namespace_, std::string_view name) {
  HttpRequest request;
  request.target = namespace_.empty() ? "/api/v1/" + std::string(Resource<T>::plural) + "/" + url_escape(name)
                                      : "/api/v1/namespaces/" + url_escape(namespace_) + "/" +
                                            std::string(Resource<T>::plural) + "/" + url_escape(name);
  request.headers.push_back(accept());
  auto response = exchange(std::move(request));
  if (!response) return std::unexpected(response.error());
  auto encoding = encoding_of(response->content_type);
  if (!encoding) return std::unexpected(encoding.error());
  return decode_object<T>(*encoding, response->body);
}

Result<Pod> Client::patch_pod_status(std::string_view namespace_, std::string_view name, std::string_view merge_patch) {
  HttpRequest request;
  request.method = "PATCH";
  request.target = "/api/v1/namespaces/" + url_escape(namespace_) + "/pods/" + url_escape(name) + "/status";
  request.headers.push_back(accept());
  request.headers.push_back("Content-Type: " + std::string(kMergePatchMediaType));
  request.body = std::string(merge_patch);
  auto response = exchange(std::move(request));
  if (!response) return std::unexpected(response.error());
  auto encoding = encoding_of(response->content_type);
  if (!encoding) return std::unexpected(encoding.error());
  return decode_object<Pod>(*encoding, response->body);
}

template <class T>
Result<WatchTally> Client::watch(const WatchOptions& options, const std::function<bool(WatchEvent<T>&)>& on_event) {
  HttpRequest request;
  request.target = "/api/v1/" + std::string(Resource<T>::plural) + "?watch=true";
  add_param(request.target, "labelSelector", options.label_selector);
  add_param(request.target, "fieldSelector", options.field_selector);
  add_param(request.target, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks) add_param(request.target, "allowWatchBookmarks", "true");
  add_param(request.target, "timeoutSeconds", std::to_string(options.timeout.count()));
  request.headers.push_back(accept());
  // The server ends the watch after timeoutSeconds; allow it a margin before calling it hung.
  request.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout + std::chrono::seconds(30));
  const std::string what = "watch " + std::string(Resource<T>::plural);
  stats_.requests.fetch_add(1, std::memory_order_relaxed);

  HttpResponse refused;  // a non-200 answer, buffered for its Status
  Encoding encoding = Encoding::kJson;
  std::optional<WatchFramer> framer;
  std::optional<base::Error> failure;
  WatchTally tally;
  bool consumer_stopped = false;
  StreamHandler handler;
  handler.on_head = [&](int status, std::string_view content_type) {
    if (status != 200) {
      refused.status = status;
      refused.content_type = std::string(content_type);
      return true;
    }
    auto chosen = encoding_of(content_type);
    if (!chosen) {
      failure = chosen.error();
      return false;
    }
    encoding = *chosen;
    framer.emplace(encoding);
    return true;
  };
  handler.on_body = [&](std::string_view chunk) {
    tally.bytes += chunk.size();
    if (!framer) {  // a refusal body: keep its head for the Status
      if (refused.body.size() < (1u << 20)) refused.body.append(chunk);
      return true;
    }
    framer->feed(chunk);
    while (true) {
      auto frame = framer->next();
      if (!frame) {
        failure = frame.error();
        return false;
      }
      if (!*frame) return true;
      auto event = decode_watch_event<T>(encoding, **frame);
      if (!event) {
        ++tally.skipped;
        stats_.bad_objects.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("kube: skipped watch event resource={} reason=\"{}\"", Resource<T>::plural, event.error().context);
        continue;
      }
      if (event->type == EventType::kError) {
        failure = base::Error{Errc::kProtocol, what + ": ERROR event: " + detail::describe(event->status),
                              std::error_code(event->status.code, http_category())};
        return false;
      }
      ++tally.events;
      if (!on_event(*event)) {
        consumer_stopped = true;
        return false;
      }
    }
  };
  auto streamed = http_->stream(request, handler);
  if (failure || !streamed || refused.status != 0) stats_.request_errors.fetch_add(1, std::memory_order_relaxed);
  if (failure) return std::unexpected(std::move(*failure));
  if (!streamed) return std::unexpected(streamed.error());
  if (refused.status != 0) return std::unexpected(refusal(what, refused));
  if (framer && !consumer_stopped) {
    if (auto finished = framer->finish(); !finished) return fail(Errc::kIo, what + ": " + finished.error().context);
  }
  return tally;
}

template Result<List<Pod>> Client::list<Pod>(const ListOptions&);
template Result<List<Namespace>> Client::list<Namespace>(const ListOptions&);
template Result<Pod> Client::get<Pod>(std::string_view, std::string_view);
template Result<Namespace> Client::get<Namespace>(std::string_view, std::string_view);
template Result<WatchTally> Client::watch<Pod>(const WatchOptions&, const std::function<bool(WatchEvent<Pod>&)>&);
template Result<WatchTally> Client::watch<Namespace>(const WatchOptions&,
                                                     const std::function<bool(WatchEvent<Namespace>&)>&);

std::string annotation_patch(std::string_view key, const std::optional<std::string>& value) {
  nlohmann::json patch;
  patch["metadata"]["annotations"][std::string(key)] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  return patch.dump();
}

std::string url_escape(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace meshnode::kube
