#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/error.hpp"
#include "kube/config.hpp"

namespace meshnode::kube {

/// The error category whose values are HTTP status codes: an API refusal travels as
/// `Error{code, "...", std::error_code(410, http_category())}` so callers can branch on it.
[[nodiscard]] const std::error_category& http_category() noexcept;

/// The HTTP status an error carries (0 when it is not an HTTP refusal).
[[nodiscard]] int http_status(const base::Error& error) noexcept;

struct HttpRequest {
  std::string method = "GET";
  std::string target;                    ///< path + query, e.g. "/api/v1/pods?limit=500"
  std::vector<std::string> headers;      ///< "Name: value"
  std::string body;
  std::chrono::milliseconds timeout{0};  ///< whole exchange; 0 = the client's default
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

/// Receives a streamed response. `on_head` sees the status and Content-Type once, before any
/// body byte; `on_body` each chunk as it arrives. Either returns false to end the exchange early
/// (the call then returns success: the handler knows why it stopped).
struct StreamHandler {
  std::function<bool(int status, std::string_view content_type)> on_head;
  std::function<bool(std::string_view chunk)> on_body;
};

/// Limits of one HTTP client.
struct HttpOptions {
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds request_timeout{60'000};  ///< default for `request`
  std::size_t max_body_bytes = 256u << 20;              ///< buffered bodies (lists of 10,000+ pods)
  std::string user_agent = "meshnode-agent";
};

/// HTTP/1.1 to one API server over libcurl (TLS by OpenSSL), with the configured CA, client
/// certificate and bearer token (re-read per request, see bearer_token). Calls block the calling
/// thread; connections are kept alive between calls. One thread at a time may call
/// `request`/`stream`; `interrupt` may be called from any thread.
///
/// HTTP/1.1 on purpose: it is what the tests (and the fake API server) exercise, and a node agent
/// needs only a few connections. Transport failures map to Errc::kConnectFailed (refused,
/// unreachable, DNS), kTlsHandshake (certificate, handshake), kTimeout, kIo (reset, partial
/// response), kClosed ("interrupted").
class HttpClient {
 public:
  /// Errc::kConfig when `config.server` is not an http(s) URL.
  [[nodiscard]] static base::Result<std::unique_ptr<HttpClient>> create(ClusterConfig config, HttpOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// One exchange with a buffered body (any status is a success here; the caller reads it).
  [[nodiscard]] base::Result<HttpResponse> request(const HttpRequest& request);

  /// One exchange whose body goes to `handler` as it arrives (watches). Returns when the server
  /// ends the body, the handler says stop, the timeout passes or `interrupt` is called.
  [[nodiscard]] base::Result<void> stream(const HttpRequest& request, const StreamHandler& handler);

  /// Makes the call in progress (and every later one until `resume`) end at once with
  /// Errc::kClosed. Any thread.
  void interrupt();
  /// Clears `interrupt`.
  void resume();

  [[nodiscard]] const ClusterConfig& config() const noexcept { return config_; }

 private:
  struct Impl;
  HttpClient(ClusterConfig config, HttpOptions options, std::unique_ptr<Impl> impl);
  ClusterConfig config_;
  HttpOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::kube
