#include "tls/cert_manager.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tls/local_ca.hpp"
#include "tls_test_util.hpp"

namespace meshnode::tls {
namespace {

using namespace std::chrono_literals;
using testing::spiffe;
using testing::TempDir;
using TimePoint = std::chrono::system_clock::time_point;

// Wraps a LocalCa: counts issues, can be told to fail, can lie about the identity.
class FakeProvider : public CertificateProvider {
 public:
  struct Knobs {
    std::atomic<int> issued{0};
    std::atomic<bool> fail{false};
  };

  FakeProvider(std::unique_ptr<LocalCa> ca, std::shared_ptr<Knobs> knobs)
      : ca_(std::move(ca)), knobs_(std::move(knobs)) {}

  Result<CertifiedKey> issue(const base::SpiffeId& id) override {
    if (knobs_->fail) return base::fail(base::Errc::kCertificate, "CA unavailable");
    ++knobs_->issued;
    return ca_->issue(id);
  }

 private:
  std::unique_ptr<LocalCa> ca_;
  std::shared_ptr<Knobs> knobs_;
};

class CertManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = LocalCa::load_or_create(dir_.path(), 24h);
    ASSERT_TRUE(ca) << ca.error().message();
    now_ = std::chrono::system_clock::now();
    manager_ = std::make_unique<CertManager>(std::make_unique<FakeProvider>(std::move(*ca), knobs_),
                                             [this] { return now_.load(); });
  }

  TempDir dir_;
  std::shared_ptr<FakeProvider::Knobs> knobs_ = std::make_shared<FakeProvider::Knobs>();
  std::atomic<TimePoint> now_;
  std::unique_ptr<CertManager> manager_;
  base::SpiffeId id_ = spiffe("cluster.local", "default", "reviews");
};

TEST_F(CertManagerTest, CachesPerIdentity) {
  auto a = manager_->get(id_);
  ASSERT_TRUE(a) << a.error().message();
  auto b = manager_->get(id_);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(knobs_->issued, 1);
  EXPECT_EQ((*a)->identity, id_);
  EXPECT_TRUE((*a)->server_ctx && (*a)->client_ctx);
  ASSERT_EQ((*a)->root_pems.size(), 1u);

  auto other = manager_->get(spiffe("cluster.local", "default", "ratings"));
  ASSERT_TRUE(other);
  EXPECT_NE(other->get(), a->get());
  EXPECT_EQ(knobs_->issued, 2);
}

TEST_F(CertManagerTest, ReissuesAfterHalfLife) {
  auto first = manager_->get(id_);
  ASSERT_TRUE(first);
  now_ = now_.load() + 11h;  // just before half of 24h (+1 min backdate)
  auto same = manager_->get(id_);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->get(), first->get());

  now_ = now_.load() + 2h;
  auto rotated = manager_->get(id_);
  ASSERT_TRUE(rotated);
  EXPECT_NE(rotated->get(), first->get());
  EXPECT_NE((*rotated)->serial_hex, (*first)->serial_hex);
  EXPECT_EQ(knobs_->issued, 2);
  // The old material stays usable by whoever still holds it (live connections).
  EXPECT_TRUE((*first)->server_ctx);
}

TEST_F(CertManagerTest, KeepsServingValidCertificateWhenRefreshFails) {
  auto first = manager_->get(id_);
  ASSERT_TRUE(first);
  knobs_->fail = true;
  now_ = now_.load() + 13h;
  auto still = manager_->get(id_);
  ASSERT_TRUE(still) << still.error().message();
  EXPECT_EQ(still->get(), first->get());

  now_ = now_.load() + 12h;  // past notAfter: nothing valid left to serve
  auto expired = manager_->get(id_);
  ASSERT_FALSE(expired);
  EXPECT_EQ(expired.error().code, base::Errc::kCertificate);
  EXPECT_TRUE(manager_->dump().empty());
}

TEST_F(CertManagerTest, FirstIssueFailureIsAnError) {
  knobs_->fail = true;
  auto r = manager_->get(id_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, base::Errc::kCertificate);
}

TEST_F(CertManagerTest, DumpListsCachedCertificates) {
  auto tls = manager_->get(id_);
  ASSERT_TRUE(tls);
  auto rows = manager_->dump();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].identity, "spiffe://cluster.local/ns/default/sa/reviews");
  EXPECT_EQ(rows[0].state, "Available");
  EXPECT_EQ(rows[0].serial_hex, (*tls)->serial_hex);
  EXPECT_EQ(rows[0].valid_from, to_rfc3339((*tls)->not_before));
  EXPECT_EQ(rows[0].expiration_time, to_rfc3339((*tls)->not_after));
  EXPECT_EQ(rows[0].valid_from.size(), 20u);  // "YYYY-MM-DDTHH:MM:SSZ"
  EXPECT_EQ(rows[0].leaf_pem, (*tls)->leaf_pem);
  EXPECT_EQ(rows[0].root_pems, (*tls)->root_pems);
}

TEST(CertManagerRfc3339, FormatsUtcSeconds) {
  EXPECT_EQ(to_rfc3339(std::chrono::system_clock::from_time_t(0)), "1970-01-01T00:00:00Z");
  EXPECT_EQ(to_rfc3339(std::chrono::system_clock::from_time_t(1714564800) + 999ms), "2024-05-01T12:00:00Z");
}

TEST_F(CertManagerTest, ConcurrentGetsShareOneCertificate) {
  std::vector<std::thread> threads;
  std::vector<const IdentityTls*> seen(4);
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      auto r = manager_->get(id_);
      seen[i] = r ? r->get() : nullptr;
    });
  }
  for (auto& t : threads) t.join();
  for (auto* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_NE(seen[0], nullptr);
  EXPECT_EQ(knobs_->issued, 1);
}

}  // namespace
}  // namespace meshnode::tls
