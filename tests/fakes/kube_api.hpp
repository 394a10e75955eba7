#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/process.hpp"

namespace meshnode::fakes {

/// PEM files of a throw-away PKI for TLS tests (made with the openssl CLI): a CA, a server
/// certificate for 127.0.0.1/localhost and a client certificate (CN "meshnode-agent").
struct KubeTlsFiles {
  std::string ca;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
};

/// How to start the fake API server.
struct FakeKubeApiOptions {
  std::string dir;                  ///< scratch directory (logs, PKI); required
  bool tls = false;                 ///< HTTPS with a fresh PKI in `dir`
  bool client_certificates = false; ///< accept client certificates signed by the PKI's CA as users
  std::vector<std::string> tokens;  ///< accepted bearer tokens (none and no client CA: anonymous)
  std::string token_file;           ///< accepted tokens re-read from this file per request
};

/// The reply of one HTTP exchange with the fake.
struct FakeReply {
  long status = 0;
  std::string content_type;
  std::string body;
  /// The body as JSON (null when it is not JSON).
  [[nodiscard]] nlohmann::json json() const;
};

/// tests/fakes/kube_api_server.py as a child process, plus typed helpers that drive it through
/// the Kubernetes API itself (create/patch/delete, always JSON) and its /fake/ controls. Calls
/// throw std::runtime_error on transport failures and on unexpected HTTP statuses (tests want to
/// stop there). Single-threaded use; the server itself serves any number of clients.
class FakeKubeApi {
 public:
  /// Starts the server and waits (up to 10 s) for its "listening" line.
  static std::unique_ptr<FakeKubeApi> start(FakeKubeApiOptions options);
  ~FakeKubeApi();

  [[nodiscard]] const std::string& url() const noexcept { return url_; }
  [[nodiscard]] const KubeTlsFiles& tls() const noexcept { return tls_; }
  /// A kubeconfig file for kubectl pointing at this server (TLS: CA + client cert when enabled;
  /// `token` when non-empty). Returns its path.
  [[nodiscard]] std::string write_kubeconfig(const std::string& token = {}) const;

  /// One raw exchange (no authentication: the fake's controls need none; API calls with
  /// authentication enabled need `headers`).
  FakeReply call(const std::string& method, const std::string& target, const std::string& body = {},
                 const std::string& content_type = "application/json",
                 const std::vector<std::string>& headers = {}) const;

  // --- the Kubernetes API (JSON), each expecting a 2xx answer ---
  nlohmann::json create_namespace(const std::string& name, const nlohmann::json& labels = nlohmann::json::object());
  /// Creates a pod bound to `node` (spec.nodeName) with one container; `extra` is merged into it
  /// (JSON merge patch semantics) before creation.
  nlohmann::json create_pod(const std::string& ns, const std::string& name, const std::string& node,
                            const nlohmann::json& extra = nlohmann::json::object());
  nlohmann::json patch_pod(const std::string& ns, const std::string& name, const nlohmann::json& merge_patch);
  /// What a kubelet does: patches pods/<name>/status.
  nlohmann::json patch_pod_status(const std::string& ns, const std::string& name, const nlohmann::json& merge_patch);
  nlohmann::json patch_namespace(const std::string& name, const nlohmann::json& merge_patch);
  /// DELETE with gracePeriodSeconds (0 = gone at once; > 0 on a bound pod = deletionTimestamp).
  nlohmann::json delete_pod(const std::string& ns, const std::string& name, int grace_seconds = 0);
  nlohmann::json get_pod(const std::string& ns, const std::string& name);

  // --- test controls ---
  std::string resource_version();           ///< the server's current resourceVersion
  void compact();                           ///< forget all history: older versions get 410
  int drop_watches();                       ///< abrupt close of every watch; returns how many
  int truncate_watches();                   ///< half a frame, then close
  int garbage_watches(const std::string& bytes);  ///< raw bytes into every watch stream
  int bookmark();                           ///< a BOOKMARK to every watch that allows them
  void configure(const nlohmann::json& config);  ///< {"expiredAs": "event"|"http", ...}
  /// Watches currently open.
  int watches();
  /// Every request the server saw: [{method, path, query{}, accept, contentType, user}].
  nlohmann::json requests();
  void reset_requests();

  /// Waits until `watches()` reaches `n` (the client reconnected); false after `timeout`.
  bool wait_for_watches(int n, std::chrono::milliseconds timeout);

 private:
  FakeKubeApi() = default;
  nlohmann::json expect_2xx(const FakeReply& reply, const std::string& what) const;
  FakeKubeApiOptions options_;
  KubeTlsFiles tls_;
  std::string url_;
  integration::Process process_;
};

/// Makes the PKI of KubeTlsFiles in `dir` with the openssl CLI; throws std::runtime_error.
KubeTlsFiles make_kube_tls_files(const std::string& dir);

/// The directory holding kube_api_server.py (from the build, MESHNODE_SOURCE_DIR).
std::string kube_fake_dir();

}  // namespace meshnode::fakes
