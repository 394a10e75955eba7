// The fake API server checked against the real kubectl (Debian package `kubectl`): what kubectl
// does against a cluster - discovery, create (kubectl sends protobuf bodies), get as table and
// JSON, paged lists, field selectors, label, status patch, watch - must work the same against
// the fake, over TLS with a client certificate. Skips without kubectl; fails when CI=true.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "fakes/kube_api.hpp"
#include "unit/kube/scratch_dir.hpp"
#include "kube/informer.hpp"

namespace meshnode::kube {
namespace {

using namespace std::chrono_literals;
using fakes::FakeKubeApi;
using nlohmann::json;

bool have_kubectl() { return std::system("kubectl version --client >/dev/null 2>&1") == 0; }

class KubectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_kubectl()) {
      const char* ci = std::getenv("CI");
      if (ci && std::string(ci) == "true") FAIL() << "kubectl is missing (scripts/install-deps.sh installs it)";
      GTEST_SKIP() << "kubectl not installed: the fake API server is not checked against it";
    }
    fake_ = FakeKubeApi::start({.dir = dir_, .tls = true, .client_certificates = true});
    kubeconfig_ = fake_->write_kubeconfig();
  }
  void TearDown() override {
    fake_.reset();
  }

  std::vector<std::string> argv(std::vector<std::string> args) {
    args.insert(args.begin(), {"kubectl", "--kubeconfig", kubeconfig_, "--cache-dir", dir_ + "/kubectl-cache"});
    return args;
  }
  /// Runs kubectl; expects exit 0 and returns stdout.
  std::string kubectl(std::vector<std::string> args) {
    auto result = integration::run(argv(std::move(args)), 60s, dir_);
    EXPECT_EQ(result.exit_code, 0) << result.describe();
    return result.out;
  }

  ScratchDir scratch_{"meshnode-kubectl"};
  const std::string& dir_ = scratch_.path();
  std::string kubeconfig_;
  std::unique_ptr<FakeKubeApi> fake_;
};

TEST_F(KubectlTest, CreateGetListPatchLikeACluster) {
  EXPECT_NE(kubectl({"create", "namespace", "demo"}).find("namespace/demo created"), std::string::npos);
  const json ns = json::parse(kubectl({"get", "namespace", "demo", "-o", "json"}));
  EXPECT_EQ(ns["status"]["phase"], "Active");
  EXPECT_EQ(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "demo");

  std::ofstream(dir_ + "/pod.json") << R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"demo",
    "labels":{"app":"web"}},"spec":{"nodeName":"node-1","containers":[{"name":"app","image":"busybox"}]}})";
  // --validate=false: the fake serves no OpenAPI schema for client-side validation.
  EXPECT_NE(kubectl({"create", "--validate=false", "-f", dir_ + "/pod.json"}).find("pod/web created"), std::string::npos);
  for (int i = 0; i < 4; ++i) fake_->create_pod("demo", "other" + std::to_string(i), i % 2 ? "node-1" : "node-2");

  // Human output is the server-side table, as from a real API server.
  const std::string table = kubectl({"get", "pods", "-n", "demo"});
  EXPECT_NE(table.find("NAME"), std::string::npos) << table;
  EXPECT_NE(table.find("STATUS"), std::string::npos) << table;
  EXPECT_NE(table.find("Pending"), std::string::npos) << table;

  fake_->reset_requests();
  const std::string all = kubectl({"get", "pods", "-A", "--chunk-size=2", "-o", "name"});
  EXPECT_EQ(all, "pod/other0\npod/other1\npod/other2\npod/other3\npod/web\n");
  int pages = 0;
  for (const auto& r : fake_->requests()) {
    if (r["path"] == "/api/v1/pods") {
      EXPECT_EQ(r["query"]["limit"], "2");
      ++pages;
    }
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(kubectl({"get", "pods", "-A", "--field-selector", "spec.nodeName=node-1", "-o", "name"}),
            "pod/other1\npod/other3\npod/web\n");

  EXPECT_NE(kubectl({"label", "pod", "-n", "demo", "web", "istio.io/dataplane-mode=ambient"}).find("labeled"),
            std::string::npos);
  EXPECT_EQ(fake_->get_pod("demo", "web")["metadata"]["labels"]["istio.io/dataplane-mode"], "ambient");
  kubectl({"patch", "pod", "web", "-n", "demo", "--subresource=status", "--type=merge", "-p",
           R"({"metadata":{"annotations":{"ambient.istio.io/redirection":"enabled"}},"status":{"phase":"Running","podIP":"10.0.0.9"}})"});
  EXPECT_EQ(kubectl({"get", "pod", "web", "-n", "demo", "-o",
                     "jsonpath={.metadata.annotations.ambient\\.istio\\.io/redirection} {.status.phase} {.status.podIP}"}),
            "enabled Running 10.0.0.9");
  // The main resource ignores status, the status subresource ignores spec - as the API server.
  kubectl({"patch", "pod", "web", "-n", "demo", "--type=merge", "-p", R"({"status":{"phase":"Failed"}})"});
  EXPECT_EQ(fake_->get_pod("demo", "web")["status"]["phase"], "Running");

  auto missing = integration::run(argv({"get", "pod", "nope", "-n", "demo"}), 60s, dir_);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("pods \"nope\" not found"), std::string::npos) << missing.describe();
  kubectl({"delete", "pod", "web", "-n", "demo", "--grace-period=0", "--force"});
  EXPECT_EQ(fake_->call("GET", "/api/v1/namespaces/demo/pods/web").status, 404);
}

TEST_F(KubectlTest, WatchSeesWhatMeshnodesClientSeesAndKubectlWritesReachTheInformer) {
  fake_->create_namespace("demo");
  fake_->create_pod("demo", "web", "node-1");
  auto cfg = kubeconfig_config(kubeconfig_);
  ASSERT_TRUE(cfg) << cfg.error().message();
  InformerOptions<Pod> options;
  options.field_selector = "spec.nodeName=node-1";
  auto informer = PodInformer::start(*cfg, options);
  ASSERT_TRUE(informer);
  ASSERT_TRUE((*informer)->wait_for_sync(10s));

  auto watch = integration::Process::spawn(
      argv({"get", "pods", "-n", "demo", "--watch", "--output-watch-events", "-o", "json"}),
      {dir_ + "/watch.out", dir_ + "/watch.err", false});
  ASSERT_TRUE(watch.wait_for_line("\"ADDED\"", 30s)) << watch.stderr_text();
  ASSERT_TRUE(fake_->wait_for_watches(2, 10s));

  kubectl({"label", "pod", "-n", "demo", "web", "istio.io/dataplane-mode=ambient"});
  ASSERT_TRUE(watch.wait_for_line("\"MODIFIED\"", 30s)) << watch.stdout_text();
  auto labelled = (*informer)->wait_for("demo/web", 10s, [](const Pod& p) {
    return p.metadata.labels.contains("istio.io/dataplane-mode");
  });
  ASSERT_NE(labelled, nullptr);
  EXPECT_EQ(*labelled->metadata.labels.find("istio.io/dataplane-mode"), "ambient");

  kubectl({"delete", "pod", "web", "-n", "demo", "--grace-period=0", "--force"});
  ASSERT_TRUE(watch.wait_for_line("\"DELETED\"", 30s)) << watch.stdout_text();
  EXPECT_TRUE(integration::eventually(10s, [&] { return (*informer)->get("demo/web") == nullptr; }));
  watch.terminate();
}

}  // namespace
}  // namespace meshnode::kube
