// kubeconfig and in-cluster configuration: what kubectl would connect to, or a clear refusal.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "kube/backoff.hpp"
#include "kube/client.hpp"
#include "kube/config.hpp"
#include "unit/kube/scratch_dir.hpp"

namespace meshnode::kube {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  ScratchDir scratch_{"meshnode-kubecfg"};
  const std::string& dir_ = scratch_.path();
};

constexpr const char* kKubeconfig = R"(apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod-cluster
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: lab-cluster
  cluster:
    server: http://127.0.0.1:8080
    certificate-authority: certs/ca.pem
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    client-certificate: certs/admin.pem
    client-key: /etc/keys/admin-key.pem
- name: robot
  user:
    token: abc.def
- name: gke
  user:
    exec:
      command: gke-gcloud-auth-plugin
contexts:
- name: prod
  context: {cluster: prod-cluster, user: admin, namespace: shop}
- name: lab
  context: {cluster: lab-cluster, user: robot}
- name: cloud
  context: {cluster: prod-cluster, user: gke}
- name: broken
  context: {cluster: nowhere, user: admin}
)";

TEST_F(ConfigTest, CurrentContextWithInlineCaAndRelativeCertificatePaths) {
  auto c = kubeconfig_config(write("config", kKubeconfig));
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_TRUE(c->ca_file.empty());
  EXPECT_EQ(c->client_cert_file, dir_ + "/certs/admin.pem");
  EXPECT_EQ(c->client_key_file, "/etc/keys/admin-key.pem");
  EXPECT_EQ(c->namespace_, "shop");
  EXPECT_NE(c->source.find("context prod"), std::string::npos);
}

TEST_F(ConfigTest, NamedContextWithToken) {
  auto c = kubeconfig_config(write("config", kKubeconfig), "lab");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->server, "http://127.0.0.1:8080");
  EXPECT_EQ(c->ca_file, dir_ + "/certs/ca.pem");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(bearer_token(*c).value(), "abc.def");
}

TEST_F(ConfigTest, RefusalsNameTheProblem) {
  const auto path = write("config", kKubeconfig);
  auto exec = kubeconfig_config(path, "cloud");
  ASSERT_FALSE(exec);
  EXPECT_EQ(exec.error().code, base::Errc::kConfig);
  EXPECT_NE(exec.error().context.find("exec/auth-provider plugin"), std::string::npos) << exec.error().context;
  auto missing = kubeconfig_config(path, "broken");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().context.find("nowhere"), std::string::npos);
  EXPECT_FALSE(kubeconfig_config(path, "nope"));
  EXPECT_FALSE(kubeconfig_config(dir_ + "/absent"));
  auto garbage = kubeconfig_config(write("garbage", "clusters: [unclosed"));
  ASSERT_FALSE(garbage);
  EXPECT_NE(garbage.error().context.find("garbage"), std::string::npos);
  EXPECT_FALSE(kubeconfig_config(write("bad64", R"(current-context: a
clusters: [{name: c, cluster: {server: "https://x", certificate-authority-data: "!!"}}]
contexts: [{name: a, context: {cluster: c}}]
)")));
}

TEST_F(ConfigTest, InClusterNeedsTheServiceEnvironmentAndAToken) {
  auto none = in_cluster_config(InClusterSource{});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().context.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  const auto token = write("token", "eyJhbGciOi.token\n");
  auto v6 = in_cluster_config({"fd00::1", "443", token, dir_ + "/ca.crt", dir_ + "/none"});
  ASSERT_TRUE(v6) << v6.error().message();
  EXPECT_EQ(v6->server, "https://[fd00::1]:443");
  EXPECT_EQ(v6->token_file, token);
  EXPECT_EQ(bearer_token(*v6).value(), "eyJhbGciOi.token");
  EXPECT_FALSE(in_cluster_config({"10.96.0.1", "443", write("empty", ""), dir_ + "/ca.crt", ""}));
  EXPECT_FALSE(in_cluster_config({"10.96.0.1", "443", dir_ + "/absent", dir_ + "/ca.crt", ""}));
}

TEST(KubeQuery, EscapingAndPatches) {
  EXPECT_EQ(url_escape("spec.nodeName=node-1"), "spec.nodeName%3Dnode-1");
  EXPECT_EQ(url_escape("a b,c/d"), "a%20b%2Cc%2Fd");
  EXPECT_EQ(annotation_patch("ambient.istio.io/redirection", "enabled"),
            R"({"metadata":{"annotations":{"ambient.istio.io/redirection":"enabled"}}})");
  EXPECT_EQ(annotation_patch("ambient.istio.io/redirection", std::nullopt),
            R"({"metadata":{"annotations":{"ambient.istio.io/redirection":null}}})");
}

TEST(KubeBackoff, ClientGoDefaults) {
  Backoff backoff(BackoffPolicy{});
  auto t = std::chrono::steady_clock::now();
  std::vector<long long> waits;
  for (int i = 0; i < 8; ++i) waits.push_back(backoff.next(t += std::chrono::seconds(1)).count());
  // 800 ms doubling, jitter up to +100%, capped at 30 s (60 s with jitter).
  EXPECT_GE(waits[0], 800);
  EXPECT_LT(waits[0], 1600);
  EXPECT_GE(waits[1], 1600);
  EXPECT_GE(waits[6], 30000);
  EXPECT_LT(waits[7], 60000);
  // Two quiet minutes reset it.
  EXPECT_LT(backoff.next(t + std::chrono::minutes(3)).count(), 1600);
}

}  // namespace
}  // namespace meshnode::kube
