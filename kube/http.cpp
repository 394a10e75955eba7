#include "kube/http.hpp"

#include <curl/curl.h>

#include <mutex>

#include "base/deleter.hpp"

namespace meshnode::kube {
namespace {

using base::Errc;
using base::fail;
using base::Result;

class HttpCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "http"; }
  std::string message(int status) const override { return "HTTP " + std::to_string(status); }
};

using EasyPtr = std::unique_ptr<CURL, base::Deleter<&curl_easy_cleanup>>;
using SlistPtr = std::unique_ptr<curl_slist, base::Deleter<&curl_slist_free_all>>;

void multi_cleanup(CURLM* multi) { curl_multi_cleanup(multi); }
using MultiPtr = std::unique_ptr<CURLM, base::Deleter<&multi_cleanup>>;

/// State of one exchange, shared with libcurl's callbacks.
struct Transfer {
  CURL* easy = nullptr;
  const StreamHandler* handler = nullptr;  // streaming, else buffered into `response.body`
  std::size_t max_body = 0;
  HttpResponse response;
  bool head_seen = false;
  bool stopped = false;    // the handler asked to stop
  bool too_large = false;
  char error[CURL_ERROR_SIZE] = {};

  bool see_head() {
    if (head_seen) return true;
    head_seen = true;
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    char* type = nullptr;
    curl_easy_getinfo(easy, CURLINFO_CONTENT_TYPE, &type);
    response.status = static_cast<int>(code);
    response.content_type = type ? type : "";
    if (handler && handler->on_head && !handler->on_head(response.status, response.content_type)) stopped = true;
    return !stopped;
  }
};

std::size_t on_write(char* data, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  if (!t.see_head()) return 0;  // 0 makes libcurl abort with CURLE_WRITE_ERROR
  if (t.handler) {
    if (!t.handler->on_body(std::string_view(data, n))) {
      t.stopped = true;
      return 0;
    }
    return n;
  }
  if (t.response.body.size() + n > t.max_body) {
    t.too_large = true;
    return 0;
  }
  t.response.body.append(data, n);
  return n;
}

Result<void> map_curl_error(CURLcode code, const Transfer& t, const std::string& what) {
  const std::string detail = what + ": " + (t.error[0] ? t.error : curl_easy_strerror(code));
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
      return fail(Errc::kConnectFailed, detail);
    case CURLE_OPERATION_TIMEDOUT:
      return fail(Errc::kTimeout, detail);
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CIPHER:
      return fail(Errc::kTlsHandshake, detail);
    default:
      return fail(Errc::kIo, detail);
  }
}

void set_blob(CURL* easy, CURLoption option, const std::string& pem) {
  curl_blob blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
  curl_easy_setopt(easy, option, &blob);
}

void set_tls(CURL* easy, const ClusterConfig& c) {
  if (!c.ca_pem.empty()) set_blob(easy, CURLOPT_CAINFO_BLOB, c.ca_pem);
  if (!c.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, c.ca_file.c_str());
  if (c.insecure_skip_tls_verify) {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!c.client_cert_pem.empty()) set_blob(easy, CURLOPT_SSLCERT_BLOB, c.client_cert_pem);
  if (!c.client_cert_file.empty()) curl_easy_setopt(easy, CURLOPT_SSLCERT, c.client_cert_file.c_str());
  if (!c.client_key_pem.empty()) set_blob(easy, CURLOPT_SSLKEY_BLOB, c.client_key_pem);
  if (!c.client_key_file.empty()) curl_easy_setopt(easy, CURLOPT_SSLKEY, c.client_key_file.c_str());
  curl_easy_setopt(easy, CURLOPT_SSLVERSION, static_cast<long>(CURL_SSLVERSION_TLSv1_2));
}

}  // namespace

const std::error_category& http_category() noexcept {
  static const HttpCategory category;
  return category;
}

int http_status(const base::Error& error) noexcept {
  return error.cause.category() == http_category() ? error.cause.value() : 0;
}

struct HttpClient::Impl {
  MultiPtr multi;
  std::atomic<bool> interrupted{false};

  Result<void> perform(CURL* easy, Transfer& t, const std::string& what) {
    curl_multi_add_handle(multi.get(), easy);
    Result<void> outcome;
    int running = 1;
    while (true) {
      if (interrupted.load()) {
        outcome = fail(Errc::kClosed, what + ": interrupted");
        break;
      }
      if (curl_multi_perform(multi.get(), &running) != CURLM_OK) {
        outcome = fail(Errc::kInternal, what + ": curl_multi_perform failed");
        break;
      }
      if (running == 0) {
        int left = 0;
        CURLcode code = CURLE_OK;
        while (CURLMsg* msg = curl_multi_info_read(multi.get(), &left)) {
          if (msg->msg == CURLMSG_DONE) code = msg->data.result;
        }
        if (code == CURLE_WRITE_ERROR && t.stopped) break;  // the handler ended it
        if (t.too_large) {
          outcome = fail(Errc::kProtocol, what + ": response body exceeds " + std::to_string(t.max_body) + " bytes");
        } else if (code != CURLE_OK) {
          outcome = map_curl_error(code, t, what);
        } else {
          t.see_head();  // bodiless responses
        }
        break;
      }
      // Wakes on socket activity, curl_multi_wakeup (interrupt) or after 1 s.
      curl_multi_poll(multi.get(), nullptr, 0, 1000, nullptr);
    }
    curl_multi_remove_handle(multi.get(), easy);
    return outcome;
  }
};

HttpClient::HttpClient(ClusterConfig config, HttpOptions options, std::unique_ptr<Impl> impl)
    : config_(std::move(config)), options_(std::move(options)), impl_(std::move(impl)) {}

HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::create(ClusterConfig config, HttpOptions options) {
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return fail(Errc::kConfig, "API server URL \"" + config.server + "\" is not http(s)");
  }
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  auto impl = std::make_unique<Impl>();
  impl->multi.reset(curl_multi_init());
  if (!impl->multi) return fail(Errc::kInternal, "curl_multi_init failed");
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(config), std::move(options), std::move(impl)));
}

void HttpClient::interrupt() {
  impl_->interrupted = true;
  curl_multi_wakeup(impl_->multi.get());
}

void HttpClient::resume() { impl_->interrupted = false; }

namespace {

struct PreparedRequest {
  SlistPtr headers;  // declared first: destroyed after the easy handle that points at it
  EasyPtr easy;
  std::string what;  // "GET /api/v1/pods" for error messages
};

Result<PreparedRequest> prepare(const ClusterConfig& config, const HttpOptions& options, const HttpRequest& request,
                                Transfer& t, std::chrono::milliseconds timeout) {
  PreparedRequest p;
  p.what = request.method + " " + request.target.substr(0, request.target.find('?'));
  p.easy.reset(curl_easy_init());
  if (!p.easy) return fail(Errc::kInternal, "curl_easy_init failed");
  CURL* easy = p.easy.get();
  t.easy = easy;
  const std::string url = config.server + request.target;
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (!request.body.empty() || request.method != "GET") {
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  if (request.method == "GET") curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, options.user_agent.c_str());
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t.error);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &on_write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
  set_tls(easy, config);
  curl_slist* list = nullptr;
  for (const auto& h : request.headers) list = curl_slist_append(list, h.c_str());
  auto token = bearer_token(config);
  if (!token) {
    curl_slist_free_all(list);
    return std::unexpected(token.error());
  }
  if (!token->empty()) list = curl_slist_append(list, ("Authorization: Bearer " + *token).c_str());
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip for patch bodies
  p.headers.reset(list);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list);
  return p;
}

}  // namespace

Result<HttpResponse> HttpClient::request(const HttpRequest& request) {
  Transfer t;
  t.max_body = options_.max_body_bytes;
  auto timeout = request.timeout.count() > 0 ? request.timeout : options_.request_timeout;
  auto prepared = prepare(config_, options_, request, t, timeout);
  if (!prepared) return std::unexpected(prepared.error());
  if (auto done = impl_->perform(prepared->easy.get(), t, prepared->what); !done) return std::unexpected(done.error());
  return std::move(t.response);
}

Result<void> HttpClient::stream(const HttpRequest& request, const StreamHandler& handler) {
  Transfer t;
  t.handler = &handler;
  auto prepared = prepare(config_, options_, request, t, request.timeout);
  if (!prepared) return std::unexpected(prepared.error());
  return impl_->perform(prepared->easy.get(), t, prepared->what);
}

}  // namespace meshnode::kube
