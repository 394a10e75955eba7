// The informer and client against the fake API server (tests/fakes/kube_api_server.py), in both
// encodings: paged lists, watch resume without missed or repeated events, 410 -> re-list (HTTP
// and ERROR event), bookmarks, broken streams, TLS + client certificates, rotating tokens,
// status merge patches and the CNI path's wait for a pod.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "fakes/kube_api.hpp"
#include "unit/kube/scratch_dir.hpp"
#include "kube/client.hpp"
#include "kube/enrollment.hpp"
#include "kube/informer.hpp"

namespace meshnode::kube {
namespace {

using namespace std::chrono_literals;
using fakes::FakeKubeApi;
using nlohmann::json;

/// Every handler call as one line: "add shop/a", "update shop/a 105", "delete shop/a unknown".
class Recorder {
 public:
  InformerHandlers<Pod> handlers() {
    return {[this](const Pod& p) { push("add " + object_key(p.metadata)); },
            [this](const Pod&, const Pod& now) {
              push("update " + object_key(now.metadata) + " " + now.metadata.resource_version);
            },
            [this](const Pod& last, bool unknown) {
              push("delete " + object_key(last.metadata) + (unknown ? " unknown" : ""));
            }};
  }
  /// Waits until `n` lines were recorded; returns all lines.
  std::vector<std::string> wait(std::size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return lines_.size() >= n; });
    return lines_;
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    lines_.clear();
  }

 private:
  void push(std::string line) {
    {
      std::lock_guard lock(mutex_);
      lines_.push_back(std::move(line));
    }
    cv_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

class InformerTest : public ::testing::TestWithParam<Encoding> {
 protected:
  void SetUp() override {
    fake_ = FakeKubeApi::start({dir_});
    fake_->create_namespace("shop", {{"istio.io/dataplane-mode", "ambient"}});
  }
  void TearDown() override {
    informer_.reset();
    fake_.reset();
  }

  InformerOptions<Pod> options() {
    InformerOptions<Pod> o;
    o.field_selector = "spec.nodeName=node-1";
    o.encoding = GetParam();
    o.page_size = 3;
    o.backoff = BackoffPolicy{10ms, 200ms, 2.0, 0.5, 120s};
    o.index = pod_ip_index;
    return o;
  }
  ClusterConfig config() { return ClusterConfig{.server = fake_->url(), .source = "test"}; }

  void start(InformerOptions<Pod> o) {
    auto informer = PodInformer::start(config(), std::move(o), recorder_.handlers());
    ASSERT_TRUE(informer) << informer.error().message();
    informer_ = std::move(*informer);
    ASSERT_TRUE(informer_->wait_for_sync(10s));
  }
  void start() { start(options()); }
  /// Changes made while the watch is down and history is compacted, the expiry reported as
  /// `expired_as` ("event": ERROR in a 200 stream, "http": 410): the informer must re-list and
  /// report exactly the differences.
  void expire_while_away(const char* expired_as) {
    for (const char* name : {"keep", "gone", "again"}) fake_->create_pod("shop", name, "node-1");
    start_watching();
    fake_->configure({{"expiredAs", expired_as}, {"watchRefusal", 503}});
    fake_->drop_watches();
    fake_->patch_pod("shop", "keep", {{"metadata", {{"labels", {{"v", "2"}}}}}});
    fake_->delete_pod("shop", "gone", 0);
    fake_->create_pod("shop", "new", "node-1");
    fake_->delete_pod("shop", "again", 0);
    fake_->create_pod("shop", "again", "node-1");  // same name, new uid
    fake_->compact();
    fake_->configure({{"watchRefusal", 0}});
    auto lines = recorder_.wait(5);
    std::sort(lines.begin(), lines.end());
    const std::string keep_rv = fake_->get_pod("shop", "keep")["metadata"]["resourceVersion"];
    EXPECT_EQ(lines, (std::vector<std::string>{"add shop/again", "add shop/new", "delete shop/again unknown",
                                               "delete shop/gone unknown", "update shop/keep " + keep_rv}));
    EXPECT_EQ(informer_->stats().relists.load(), 1u);
    EXPECT_EQ(informer_->stats().lists.load(), 2u);
  }
  /// start(), then waits for the watch to be open and forgets the events of the initial list.
  void start_watching() {
    start();
    ASSERT_TRUE(fake_->wait_for_watches(1, 10s));
    recorder_.clear();
  }

  /// The watch requests the fake saw, oldest first.
  std::vector<json> watch_requests() {
    std::vector<json> out;
    for (auto& r : fake_->requests()) {
      if (r["path"] == "/api/v1/pods" && r["query"].value("watch", "") == "true") out.push_back(r);
    }
    return out;
  }
  std::vector<json> list_requests() {
    std::vector<json> out;
    for (auto& r : fake_->requests()) {
      if (r["path"] == "/api/v1/pods" && !r["query"].contains("watch")) out.push_back(r);
    }
    return out;
  }
  /// Waits until the informer caches `key` at resourceVersion `rv`.
  bool wait_rv(const std::string& key, const std::string& rv) {
    return informer_->wait_for(key, 10s, [&](const Pod& p) { return p.metadata.resource_version == rv; }) != nullptr;
  }

  ScratchDir scratch_;
  const std::string& dir_ = scratch_.path();
  std::unique_ptr<FakeKubeApi> fake_;
  Recorder recorder_;
  std::unique_ptr<PodInformer> informer_;
};

TEST_P(InformerTest, ListsInPagesOfTheNodeThenWatchesFromTheListVersion) {
  for (int i = 0; i < 7; ++i) fake_->create_pod("shop", "a" + std::to_string(i), "node-1");
  for (int i = 0; i < 3; ++i) fake_->create_pod("shop", "b" + std::to_string(i), "node-2");
  const std::string list_rv = fake_->resource_version();
  start();
  EXPECT_EQ(informer_->size(), 7u);
  EXPECT_NE(informer_->get("shop/a3"), nullptr);
  EXPECT_EQ(informer_->get("shop/b0"), nullptr);

  const auto lists = list_requests();
  ASSERT_EQ(lists.size(), 3u);  // 3 + 3 + 1
  EXPECT_EQ(lists[0]["query"]["resourceVersion"], "0");
  EXPECT_EQ(lists[0]["query"]["limit"], "3");
  EXPECT_EQ(lists[0]["query"]["fieldSelector"], "spec.nodeName=node-1");
  EXPECT_FALSE(lists[0]["query"].contains("continue"));
  EXPECT_TRUE(lists[1]["query"].contains("continue"));
  EXPECT_FALSE(lists[1]["query"].contains("resourceVersion"));
  const std::string accept = GetParam() == Encoding::kProtobuf ? "application/vnd.kubernetes.protobuf, application/json"
                                                                : "application/json";
  EXPECT_EQ(lists[0]["accept"], accept);

  ASSERT_TRUE(fake_->wait_for_watches(1, 10s));
  const auto watches = watch_requests();
  ASSERT_EQ(watches.size(), 1u);
  EXPECT_EQ(watches[0]["query"]["resourceVersion"], list_rv);
  EXPECT_EQ(watches[0]["query"]["allowWatchBookmarks"], "true");
  EXPECT_EQ(watches[0]["query"]["fieldSelector"], "spec.nodeName=node-1");
  const int timeout = std::stoi(watches[0]["query"]["timeoutSeconds"].get<std::string>());
  EXPECT_GE(timeout, 300);
  EXPECT_LE(timeout, 600);

  recorder_.clear();
  fake_->create_pod("shop", "b9", "node-2");  // another node: never seen
  fake_->create_pod("shop", "c", "node-1");
  const auto patched = fake_->patch_pod("shop", "c", {{"metadata", {{"labels", {{"x", "y"}}}}}});
  fake_->delete_pod("shop", "a0", 0);
  const auto lines = recorder_.wait(3);
  EXPECT_EQ(lines, (std::vector<std::string>{"add shop/c", "update shop/c " + patched["metadata"]["resourceVersion"].get<std::string>(),
                                             "delete shop/a0"}));
  EXPECT_EQ(informer_->size(), 7u);
  EXPECT_EQ(informer_->stats().lists.load(), 1u);
}

TEST_P(InformerTest, ResumesAfterAnOutageWithoutMissingOrRepeatingEvents) {
  fake_->create_pod("shop", "web", "node-1");
  start_watching();
  const std::string before = informer_->resource_version();
  fake_->configure({{"watchRefusal", 503}});
  EXPECT_EQ(fake_->drop_watches(), 1);
  std::vector<std::string> expected;
  for (int i = 0; i < 5; ++i) {
    auto pod = fake_->patch_pod_status("shop", "web", {{"status", {{"podIP", "10.0.0." + std::to_string(i)}}}});
    expected.push_back("update shop/web " + pod["metadata"]["resourceVersion"].get<std::string>());
  }
  fake_->create_pod("shop", "late", "node-1");
  expected.push_back("add shop/late");
  fake_->configure({{"watchRefusal", 0}});
  EXPECT_EQ(recorder_.wait(expected.size()), expected);
  ASSERT_TRUE(fake_->wait_for_watches(1, 10s));
  // Nothing more arrives: no event was delivered twice.
  fake_->create_pod("shop", "marker", "node-1");
  expected.push_back("add shop/marker");
  EXPECT_EQ(recorder_.wait(expected.size()), expected);
  EXPECT_EQ(informer_->get("shop/web")->pod_ips, std::vector<std::string>{"10.0.0.4"});
  EXPECT_EQ(informer_->stats().lists.load(), 1u);  // resumed, not re-listed
  EXPECT_GE(informer_->stats().errors.load(), 1u);
  // Every watch after the first resumed from where the informer had got to.
  const auto watches = watch_requests();
  ASSERT_GE(watches.size(), 2u);
  EXPECT_EQ(watches[1]["query"]["resourceVersion"], before);
}

TEST_P(InformerTest, TruncatedFrameIsResumedFromTheLastWholeEvent) {
  fake_->create_pod("shop", "web", "node-1");
  start_watching();
  EXPECT_EQ(fake_->truncate_watches(), 1);
  auto pod = fake_->patch_pod("shop", "web", {{"metadata", {{"labels", {{"v", "2"}}}}}});
  EXPECT_EQ(recorder_.wait(1), std::vector<std::string>{"update shop/web " + pod["metadata"]["resourceVersion"].get<std::string>()});
  EXPECT_EQ(informer_->stats().lists.load(), 1u);
}

TEST_P(InformerTest, UndecodableEventIsSkippedAndCountedTheStreamGoesOn) {
  fake_->create_pod("shop", "web", "node-1");
  start_watching();
  const std::string garbage = GetParam() == Encoding::kProtobuf ? std::string("\x00\x00\x00\x03\x0a\x05x", 7)
                                                                 : std::string("{\"type\":\"ADDED\",\"object\":7}\n");
  EXPECT_EQ(fake_->garbage_watches(garbage), 1);
  auto pod = fake_->patch_pod("shop", "web", {{"metadata", {{"labels", {{"v", "3"}}}}}});
  EXPECT_EQ(recorder_.wait(1), std::vector<std::string>{"update shop/web " + pod["metadata"]["resourceVersion"].get<std::string>()});
  EXPECT_EQ(informer_->bad_objects(), 1u);
  EXPECT_EQ(informer_->stats().watches.load(), 1u);  // same stream, no reconnect
}

TEST_P(InformerTest, ExpiredAsErrorEventInA200StreamRelists) {
  expire_while_away("event");
  // The re-list asks for the most recent state, not the watch cache's "any version".
  const auto lists = list_requests();
  ASSERT_GE(lists.size(), 2u);
  EXPECT_FALSE(lists.back()["query"].contains("resourceVersion"));
  EXPECT_EQ(informer_->get("shop/again")->metadata.uid, fake_->get_pod("shop", "again")["metadata"]["uid"]);
}

TEST_P(InformerTest, ExpiredAsHttp410Relists) { expire_while_away("http"); }

TEST_P(InformerTest, BookmarkMovesTheResumePointPastOtherNodesChanges) {
  fake_->create_pod("shop", "web", "node-1");
  start();
  ASSERT_TRUE(fake_->wait_for_watches(1, 10s));
  for (int i = 0; i < 3; ++i) fake_->create_pod("shop", "elsewhere" + std::to_string(i), "node-2");
  const std::string server_rv = fake_->resource_version();
  EXPECT_NE(informer_->resource_version(), server_rv);
  EXPECT_EQ(fake_->bookmark(), 1);
  ASSERT_TRUE(integration::eventually(10s, [&] { return informer_->resource_version() == server_rv; }));
  EXPECT_EQ(informer_->stats().bookmarks.load(), 1u);
  // History up to the bookmark is gone; resuming from the bookmark needs none of it.
  fake_->compact();
  fake_->drop_watches();
  recorder_.clear();
  fake_->create_pod("shop", "after", "node-1");
  EXPECT_EQ(recorder_.wait(1), std::vector<std::string>{"add shop/after"});
  EXPECT_EQ(informer_->stats().relists.load(), 0u);
}

TEST_P(InformerTest, ExpiredContinueTokenFallsBackToOneFullList) {
  for (int i = 0; i < 5; ++i) fake_->create_pod("shop", "p" + std::to_string(i), "node-1");
  fake_->configure({{"expireContinue", true}});
  start();
  EXPECT_EQ(informer_->size(), 5u);
  const auto lists = list_requests();
  ASSERT_EQ(lists.size(), 3u);  // page 1, expired page 2, full list
  EXPECT_TRUE(lists[1]["query"].contains("continue"));
  EXPECT_FALSE(lists[2]["query"].contains("limit"));
  EXPECT_FALSE(lists[2]["query"].contains("continue"));
}

TEST_P(InformerTest, WaitForPodCoversTheWatchLagOfCniAdd) {
  start();
  EXPECT_EQ(informer_->wait_for("shop/late", 50ms), nullptr);
  std::thread creator([&] {
    std::this_thread::sleep_for(100ms);
    fake_->create_pod("shop", "late", "node-1");
    fake_->patch_pod_status("shop", "late", {{"status", {{"podIP", "10.0.0.77"}, {"podIPs", {{{"ip", "10.0.0.77"}}}}}}});
  });
  auto pod = informer_->wait_for("shop/late", 10s);
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(pod->node_name, "node-1");
  auto with_ip = informer_->wait_for("shop/late", 10s, [](const Pod& p) { return !p.pod_ips.empty(); });
  creator.join();
  ASSERT_NE(with_ip, nullptr);
  EXPECT_EQ(with_ip->pod_ips, std::vector<std::string>{"10.0.0.77"});
  auto by_ip = informer_->by_index("10.0.0.77");
  ASSERT_EQ(by_ip.size(), 1u);
  EXPECT_EQ(by_ip[0]->metadata.name, "late");
  fake_->patch_pod_status("shop", "late", {{"status", {{"podIP", "10.0.0.78"}, {"podIPs", {{{"ip", "10.0.0.78"}}}}}}});
  ASSERT_TRUE(integration::eventually(10s, [&] { return informer_->by_index("10.0.0.77").empty(); }));
  EXPECT_EQ(informer_->by_index("10.0.0.78").size(), 1u);
}

TEST_P(InformerTest, GracefulDeletionShowsAsDeletionTimestampThenDelete) {
  fake_->create_pod("shop", "web", "node-1");
  start_watching();
  fake_->delete_pod("shop", "web", 30);
  ASSERT_NE(informer_->wait_for("shop/web", 10s, [](const Pod& p) { return p.metadata.deletion_timestamp.has_value(); }),
            nullptr);
  fake_->delete_pod("shop", "web", 0);  // the kubelet confirms
  const auto lines = recorder_.wait(2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "delete shop/web");
}

TEST_P(InformerTest, StopsPromptlyWhileAWatchIsOpen) {
  start();
  ASSERT_TRUE(fake_->wait_for_watches(1, 10s));
  const auto t0 = std::chrono::steady_clock::now();
  informer_->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST_P(InformerTest, NamespacesClusterWide) {
  InformerOptions<Namespace> o;
  o.encoding = GetParam();
  o.backoff = BackoffPolicy{10ms, 200ms, 2.0, 0.5, 120s};
  std::mutex m;
  std::vector<std::string> updates;
  InformerHandlers<Namespace> h;
  h.on_update = [&](const Namespace&, const Namespace& now) {
    std::lock_guard lock(m);
    updates.push_back(now.metadata.name + " " + (now.metadata.labels.contains("istio.io/dataplane-mode") ? "ambient" : "-"));
  };
  auto informer = NamespaceInformer::start(config(), o, h);
  ASSERT_TRUE(informer);
  ASSERT_TRUE((*informer)->wait_for_sync(10s));
  auto shop = (*informer)->get("shop");
  ASSERT_NE(shop, nullptr);
  EXPECT_EQ(*shop->metadata.labels.find("kubernetes.io/metadata.name"), "shop");
  ASSERT_TRUE(fake_->wait_for_watches(1, 10s));
  fake_->patch_namespace("shop", {{"metadata", {{"labels", {{"istio.io/dataplane-mode", nullptr}}}}}});
  ASSERT_TRUE(integration::eventually(10s, [&] {
    std::lock_guard lock(m);
    return updates == std::vector<std::string>{"shop -"};
  }));
}

TEST_P(InformerTest, StatusMergePatchSetsAndRemovesTheRedirectionAnnotation) {
  fake_->create_pod("shop", "web", "node-1");
  auto http = HttpClient::create(config());
  ASSERT_TRUE(http);
  Client client(std::move(*http), GetParam());
  auto set = client.patch_pod_status("shop", "web", annotation_patch(kRedirectionAnnotation, "enabled"));
  ASSERT_TRUE(set) << set.error().message();
  EXPECT_EQ(*set->metadata.annotations.find(kRedirectionAnnotation), "enabled");
  EXPECT_EQ(fake_->get_pod("shop", "web")["metadata"]["annotations"][std::string(kRedirectionAnnotation)], "enabled");
  auto cleared = client.patch_pod_status("shop", "web", annotation_patch(kRedirectionAnnotation, std::nullopt));
  ASSERT_TRUE(cleared);
  EXPECT_FALSE(cleared->metadata.annotations.contains(kRedirectionAnnotation));
  const auto reqs = fake_->requests();
  const auto& last = reqs.back();
  EXPECT_EQ(last["method"], "PATCH");
  EXPECT_EQ(last["path"], "/api/v1/namespaces/shop/pods/web/status");
  EXPECT_EQ(last["contentType"], "application/merge-patch+json");
  auto missing = client.patch_pod_status("shop", "nope", annotation_patch(kRedirectionAnnotation, "enabled"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, base::Errc::kNotFound);
  EXPECT_EQ(http_status(missing.error()), 404);
  EXPECT_NE(missing.error().context.find("pods \"nope\" not found"), std::string::npos) << missing.error().context;
}

INSTANTIATE_TEST_SUITE_P(Encodings, InformerTest, ::testing::Values(Encoding::kProtobuf, Encoding::kJson),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// --- transport security and credentials ---

class SecureApiTest : public ::testing::Test {
 protected:
  ScratchDir scratch_;
  const std::string& dir_ = scratch_.path();
};

TEST_F(SecureApiTest, ClientCertificateOverTls) {
  auto fake = FakeKubeApi::start({.dir = dir_, .tls = true, .client_certificates = true});
  fake->create_namespace("shop");
  fake->create_pod("shop", "web", "node-1");
  auto cfg = kubeconfig_config(fake->write_kubeconfig());
  ASSERT_TRUE(cfg) << cfg.error().message();
  auto http = HttpClient::create(*cfg);
  ASSERT_TRUE(http);
  Client client(std::move(*http));
  auto pod = client.get<Pod>("shop", "web");
  ASSERT_TRUE(pod) << pod.error().message();
  EXPECT_EQ(fake->requests().back()["user"], "cert:meshnode-agent");

  // Without the CA the server is not trusted; without the certificate the API refuses.
  ClusterConfig no_ca = *cfg;
  no_ca.ca_file.clear();
  no_ca.ca_pem.clear();
  auto untrusted = Client(std::move(*HttpClient::create(no_ca))).get<Pod>("shop", "web");
  ASSERT_FALSE(untrusted);
  EXPECT_EQ(untrusted.error().code, base::Errc::kTlsHandshake) << untrusted.error().message();
  ClusterConfig anonymous = *cfg;
  anonymous.client_cert_file.clear();
  anonymous.client_key_file.clear();
  auto refused = Client(std::move(*HttpClient::create(anonymous))).get<Pod>("shop", "web");
  ASSERT_FALSE(refused);
  EXPECT_EQ(http_status(refused.error()), 401);
}

TEST_F(SecureApiTest, InClusterTokenIsReReadWhenItRotates) {
  const std::string server_tokens = dir_ + "/accepted";
  std::ofstream(server_tokens) << "token-1\n";
  auto fake = FakeKubeApi::start({.dir = dir_, .tls = true, .token_file = server_tokens});
  const std::string sa = dir_ + "/sa";
  std::filesystem::create_directories(sa);
  std::ofstream(sa + "/token") << "token-1";
  std::ofstream(sa + "/namespace") << "istio-system\n";
  std::filesystem::copy_file(fake->tls().ca, sa + "/ca.crt");
  const auto port = fake->url().substr(fake->url().rfind(':') + 1);
  auto cfg = in_cluster_config({"127.0.0.1", port, sa + "/token", sa + "/ca.crt", sa + "/namespace"});
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:" + port);
  EXPECT_EQ(cfg->namespace_, "istio-system");
  fake->call("POST", "/api/v1/namespaces", R"({"metadata":{"name":"shop"}})", "application/json",
             {"Authorization: Bearer token-1"});

  InformerOptions<Pod> o;
  o.backoff = BackoffPolicy{10ms, 100ms, 2.0, 0.5, 120s};
  auto informer = PodInformer::start(*cfg, o);
  ASSERT_TRUE(informer);
  ASSERT_TRUE((*informer)->wait_for_sync(10s));
  ASSERT_TRUE(fake->wait_for_watches(1, 10s));
  // The kubelet rotates the projected token; the old one stops working.
  std::ofstream(sa + "/token") << "token-2\n";
  std::ofstream(server_tokens) << "token-2\n";
  fake->drop_watches();
  ASSERT_TRUE(fake->wait_for_watches(1, 10s));
  EXPECT_EQ(fake->requests().back()["user"], "token:token-");
  fake->call("POST", "/api/v1/namespaces/shop/pods",
             R"({"metadata":{"name":"web"},"spec":{"nodeName":"n","containers":[{"name":"c","image":"i"}]}})",
             "application/json", {"Authorization: Bearer token-2"});
  EXPECT_NE((*informer)->wait_for("shop/web", 10s), nullptr);
  EXPECT_EQ((*informer)->stats().relists.load(), 0u);
}

TEST_F(SecureApiTest, WrongTokenNeverSyncs) {
  auto fake = FakeKubeApi::start({.dir = dir_, .tokens = {"right"}});
  InformerOptions<Pod> o;
  o.backoff = BackoffPolicy{10ms, 50ms, 2.0, 0.0, 120s};
  auto informer = PodInformer::start(ClusterConfig{.server = fake->url(), .token = "wrong"}, o);
  ASSERT_TRUE(informer);
  EXPECT_FALSE((*informer)->wait_for_sync(500ms));
  EXPECT_GE((*informer)->stats().errors.load(), 2u);  // retried with backoff, never gave up
}

}  // namespace
}  // namespace meshnode::kube
