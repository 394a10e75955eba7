// Drives tests/fakes/kube_api_server.py (see kube_api.hpp). The harness talks to the fake with its
// own plain libcurl calls, not with meshnode's kube::Client, so a client bug cannot hide itself.
#include "fakes/kube_api.hpp"

#include <curl/curl.h>

#include <fstream>
#include <regex>
#include <stdexcept>

namespace meshnode::fakes {
namespace {

using nlohmann::json;

std::size_t append(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

void run_or_throw(const std::vector<std::string>& argv, const std::string& dir) {
  auto result = integration::run(argv, std::chrono::seconds(30), dir);
  if (result.exit_code != 0) throw std::runtime_error("command failed: " + argv[0] + " " + result.describe());
}

}  // namespace

json FakeReply::json() const { return json::parse(body, nullptr, false); }

std::string kube_fake_dir() { return std::string(MESHNODE_SOURCE_DIR) + "/tests/fakes"; }

KubeTlsFiles make_kube_tls_files(const std::string& dir) {
  KubeTlsFiles f{dir + "/ca.pem", dir + "/server.pem", dir + "/server-key.pem", dir + "/client.pem",
                 dir + "/client-key.pem"};
  const std::string ca_key = dir + "/ca-key.pem";
  run_or_throw({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                ca_key, "-out", f.ca, "-days", "2", "-subj", "/CN=meshnode-test-kube-ca"},
               dir);
  auto issue = [&](const std::string& cert, const std::string& key, const std::string& cn, const std::string& ext) {
    const std::string csr = cert + ".csr";
    const std::string extfile = cert + ".ext";
    std::ofstream(extfile) << ext << "\n";
    run_or_throw({"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                  "-out", csr, "-subj", "/CN=" + cn},
                 dir);
    run_or_throw({"openssl", "x509", "-req", "-in", csr, "-CA", f.ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                  "-days", "2", "-extfile", extfile},
                 dir);
  };
  issue(f.server_cert, f.server_key, "kube-apiserver",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth");
  issue(f.client_cert, f.client_key, "meshnode-agent", "extendedKeyUsage=clientAuth");
  return f;
}

std::unique_ptr<FakeKubeApi> FakeKubeApi::start(FakeKubeApiOptions options) {
  std::unique_ptr<FakeKubeApi> fake(new FakeKubeApi());
  std::vector<std::string> argv{"python3", kube_fake_dir() + "/kube_api_server.py"};
  if (options.tls) {
    fake->tls_ = make_kube_tls_files(options.dir);
    argv.insert(argv.end(), {"--tls-cert", fake->tls_.server_cert, "--tls-key", fake->tls_.server_key});
    if (options.client_certificates) argv.insert(argv.end(), {"--client-ca", fake->tls_.ca});
  }
  for (const auto& token : options.tokens) argv.insert(argv.end(), {"--token", token});
  if (!options.token_file.empty()) argv.insert(argv.end(), {"--token-file", options.token_file});
  fake->process_ = integration::Process::spawn(
      argv, {options.dir + "/fake-apiserver.out", options.dir + "/fake-apiserver.err", false});
  if (!fake->process_.wait_for_line("listening ", std::chrono::seconds(10))) {
    throw std::runtime_error("fake API server did not start: " + fake->process_.stderr_text());
  }
  std::smatch m;
  const std::string out = fake->process_.stdout_text();
  if (!std::regex_search(out, m, std::regex("listening (\\S+)"))) throw std::runtime_error("no URL in: " + out);
  fake->url_ = m[1];
  fake->options_ = std::move(options);
  return fake;
}

FakeKubeApi::~FakeKubeApi() = default;

std::string FakeKubeApi::write_kubeconfig(const std::string& token) const {
  const std::string path = options_.dir + "/kubeconfig";
  json user = json::object();
  if (options_.client_certificates) {
    user["client-certificate"] = tls_.client_cert;
    user["client-key"] = tls_.client_key;
  }
  if (!token.empty()) user["token"] = token;
  json cluster{{"server", url_}};
  if (options_.tls) cluster["certificate-authority"] = tls_.ca;
  // JSON is YAML: kubectl and yaml-cpp both read it.
  json config{{"apiVersion", "v1"},
              {"kind", "Config"},
              {"clusters", json::array({{{"name", "fake"}, {"cluster", cluster}}})},
              {"users", json::array({{{"name", "tester"}, {"user", user}}})},
              {"contexts", json::array({{{"name", "fake"}, {"context", {{"cluster", "fake"}, {"user", "tester"}}}}})},
              {"current-context", "fake"}};
  std::ofstream(path) << config.dump(2) << "\n";
  return path;
}

FakeReply FakeKubeApi::call(const std::string& method, const std::string& target, const std::string& body,
                            const std::string& content_type, const std::vector<std::string>& headers) const {
  std::unique_ptr<CURL, void (*)(CURL*)> easy(curl_easy_init(), curl_easy_cleanup);
  FakeReply reply;
  const std::string url = url_ + target;
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT, 10L);
  if (method != "GET") {
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  if (options_.tls) {
    curl_easy_setopt(easy.get(), CURLOPT_CAINFO, tls_.ca.c_str());
    if (options_.client_certificates) {
      curl_easy_setopt(easy.get(), CURLOPT_SSLCERT, tls_.client_cert.c_str());
      curl_easy_setopt(easy.get(), CURLOPT_SSLKEY, tls_.client_key.c_str());
    }
  }
  curl_slist* list = curl_slist_append(nullptr, ("Content-Type: " + content_type).c_str());
  list = curl_slist_append(list, "Accept: application/json");
  if (!options_.tokens.empty()) list = curl_slist_append(list, ("Authorization: Bearer " + options_.tokens[0]).c_str());
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &append);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &reply.body);
  const CURLcode rc = curl_easy_perform(easy.get());
  curl_slist_free_all(list);
  if (rc != CURLE_OK) throw std::runtime_error(method + " " + target + ": " + curl_easy_strerror(rc));
  curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  char* type = nullptr;
  curl_easy_getinfo(easy.get(), CURLINFO_CONTENT_TYPE, &type);
  reply.content_type = type ? type : "";
  return reply;
}

json FakeKubeApi::expect_2xx(const FakeReply& reply, const std::string& what) const {
  if (reply.status < 200 || reply.status > 299) {
    throw std::runtime_error(what + ": HTTP " + std::to_string(reply.status) + " " + reply.body);
  }
  return reply.json();
}

json FakeKubeApi::create_namespace(const std::string& name, const json& labels) {
  json ns{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}, {"labels", labels}}}};
  return expect_2xx(call("POST", "/api/v1/namespaces", ns.dump()), "create namespace " + name);
}

json FakeKubeApi::create_pod(const std::string& ns, const std::string& name, const std::string& node,
                             const json& extra) {
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", name}, {"namespace", ns}}},
           {"spec", {{"nodeName", node}, {"containers", json::array({{{"name", "app"}, {"image", "busybox"}}})}}}};
  pod.merge_patch(extra);
  return expect_2xx(call("POST", "/api/v1/namespaces/" + ns + "/pods", pod.dump()), "create pod " + ns + "/" + name);
}

json FakeKubeApi::patch_pod(const std::string& ns, const std::string& name, const json& merge_patch) {
  return expect_2xx(call("PATCH", "/api/v1/namespaces/" + ns + "/pods/" + name, merge_patch.dump(),
                         "application/merge-patch+json"),
                    "patch pod " + ns + "/" + name);
}

json FakeKubeApi::patch_pod_status(const std::string& ns, const std::string& name, const json& merge_patch) {
  return expect_2xx(call("PATCH", "/api/v1/namespaces/" + ns + "/pods/" + name + "/status", merge_patch.dump(),
                         "application/merge-patch+json"),
                    "patch pod status " + ns + "/" + name);
}

json FakeKubeApi::patch_namespace(const std::string& name, const json& merge_patch) {
  return expect_2xx(call("PATCH", "/api/v1/namespaces/" + name, merge_patch.dump(), "application/merge-patch+json"),
                    "patch namespace " + name);
}

json FakeKubeApi::delete_pod(const std::string& ns, const std::string& name, int grace_seconds) {
  const json options{{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"gracePeriodSeconds", grace_seconds}};
  return expect_2xx(call("DELETE", "/api/v1/namespaces/" + ns + "/pods/" + name, options.dump()),
                    "delete pod " + ns + "/" + name);
}

json FakeKubeApi::get_pod(const std::string& ns, const std::string& name) {
  return expect_2xx(call("GET", "/api/v1/namespaces/" + ns + "/pods/" + name), "get pod " + ns + "/" + name);
}

std::string FakeKubeApi::resource_version() {
  return expect_2xx(call("POST", "/fake/state"), "state")["resourceVersion"];
}
void FakeKubeApi::compact() { expect_2xx(call("POST", "/fake/compact", "{}"), "compact"); }
int FakeKubeApi::drop_watches() { return expect_2xx(call("POST", "/fake/drop-watches", "{}"), "drop")["watches"]; }
int FakeKubeApi::truncate_watches() {
  return expect_2xx(call("POST", "/fake/truncate-watches", "{}"), "truncate")["watches"];
}
int FakeKubeApi::garbage_watches(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return expect_2xx(call("POST", "/fake/garbage-watches", json{{"bytes", hex}}.dump()), "garbage")["watches"];
}
int FakeKubeApi::bookmark() { return expect_2xx(call("POST", "/fake/bookmark", "{}"), "bookmark")["watches"]; }
void FakeKubeApi::configure(const json& config) { expect_2xx(call("POST", "/fake/config", config.dump()), "config"); }
int FakeKubeApi::watches() { return expect_2xx(call("POST", "/fake/state"), "state")["watches"]; }
json FakeKubeApi::requests() { return expect_2xx(call("GET", "/fake/requests"), "requests"); }
void FakeKubeApi::reset_requests() { expect_2xx(call("POST", "/fake/reset-requests", "{}"), "reset"); }

bool FakeKubeApi::wait_for_watches(int n, std::chrono::milliseconds timeout) {
  return integration::eventually(timeout, [&] { return watches() == n; });
}

}  // namespace meshnode::fakes
