// The status writer against the fake API server: annotations set and removed by pods/status merge
// patches off the caller's thread, the latest wish wins, outages are retried, a gone pod is not.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <mutex>

#include "fakes/kube_api.hpp"
#include "unit/kube/scratch_dir.hpp"
#include "kube/enrollment.hpp"
#include "kube/status_writer.hpp"

namespace meshnode::kube {
namespace {

using namespace std::chrono_literals;
using fakes::FakeKubeApi;

class StatusWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = FakeKubeApi::start({dir_});
    fake_->create_namespace("shop");
    for (const char* name : {"a", "b"}) fake_->create_pod("shop", name, "node-1");
    StatusWriterOptions options;
    options.backoff = BackoffPolicy{10ms, 50ms, 2.0, 0.0, 120s};
    auto writer = StatusWriter::start(ClusterConfig{.server = fake_->url()}, options,
                                      [this](const std::string& key, const base::Result<void>& r) {
                                        std::lock_guard lock(mutex_);
                                        results_.push_back(key + (r ? " ok" : " " + std::string(base::to_string(r.error().code))));
                                      });
    ASSERT_TRUE(writer);
    writer_ = std::move(*writer);
  }
  void TearDown() override {
    writer_.reset();
    fake_.reset();
  }
  nlohmann::json redirection(const char* pod) {
    auto annotations = fake_->get_pod("shop", pod)["metadata"]["annotations"];
    return annotations.is_object() && annotations.contains(std::string(kRedirectionAnnotation))
               ? annotations[std::string(kRedirectionAnnotation)]
               : nlohmann::json();
  }
  std::vector<std::string> results() {
    std::lock_guard lock(mutex_);
    return results_;
  }

  ScratchDir scratch_{"meshnode-kube-sw"};
  const std::string& dir_ = scratch_.path();
  std::unique_ptr<FakeKubeApi> fake_;
  std::unique_ptr<StatusWriter> writer_;
  std::mutex mutex_;
  std::vector<std::string> results_;
};

TEST_F(StatusWriterTest, SetsAndRemovesTheAnnotation) {
  writer_->set_annotation("shop", "a", std::string(kRedirectionAnnotation), "enabled");
  writer_->set_annotation("shop", "b", std::string(kRedirectionAnnotation), "enabled");
  ASSERT_TRUE(writer_->flush(10s));
  EXPECT_EQ(redirection("a"), "enabled");
  EXPECT_EQ(redirection("b"), "enabled");
  writer_->set_annotation("shop", "a", std::string(kRedirectionAnnotation), std::nullopt);
  ASSERT_TRUE(writer_->flush(10s));
  EXPECT_TRUE(redirection("a").is_null());
  EXPECT_EQ(redirection("b"), "enabled");
  EXPECT_EQ(results(), (std::vector<std::string>{"shop/a ok", "shop/b ok", "shop/a ok"}));
  int patches = 0;
  for (const auto& r : fake_->requests()) {
    if (r["method"] != "PATCH") continue;
    ++patches;
    EXPECT_TRUE(r["path"].get<std::string>().ends_with("/status")) << r["path"];
    EXPECT_EQ(r["contentType"], "application/merge-patch+json");
  }
  EXPECT_EQ(patches, 3);
}

TEST_F(StatusWriterTest, AnOutageIsRetriedAndOnlyTheLatestWishIsWritten) {
  fake_->configure({{"writeRefusal", 503}});
  writer_->set_annotation("shop", "a", std::string(kRedirectionAnnotation), "pending");
  ASSERT_TRUE(integration::eventually(10s, [&] { return writer_->stats().request_errors.load() >= 2; }));
  writer_->set_annotation("shop", "a", std::string(kRedirectionAnnotation), "enabled");  // supersedes
  fake_->configure({{"writeRefusal", 0}});
  ASSERT_TRUE(writer_->flush(10s));
  EXPECT_EQ(redirection("a"), "enabled");
  EXPECT_EQ(results(), std::vector<std::string>{"shop/a ok"});
}

TEST_F(StatusWriterTest, AGonePodIsNotRetried) {
  writer_->set_annotation("shop", "ghost", std::string(kRedirectionAnnotation), std::nullopt);
  ASSERT_TRUE(writer_->flush(10s));
  EXPECT_EQ(results(), std::vector<std::string>{"shop/ghost not_found"});
  EXPECT_EQ(writer_->stats().requests.load(), 1u);
}

}  // namespace
}  // namespace meshnode::kube
