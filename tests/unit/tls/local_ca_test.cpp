#include "tls/local_ca.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <future>
#include <thread>

#include "tls/ossl.hpp"
#include "tls_test_util.hpp"

namespace meshnode::tls {
namespace {

using namespace std::chrono_literals;
using testing::spiffe;
using testing::TempDir;

std::unique_ptr<LocalCa> must_load(const std::filesystem::path& dir) {
  auto ca = LocalCa::load_or_create(dir);
  EXPECT_TRUE(ca) << ca.error().message();
  return ca ? std::move(*ca) : nullptr;
}

TEST(LocalCa, CreatesRootThenReloadsTheSameOne) {
  TempDir dir;
  auto first = must_load(dir.path());
  ASSERT_TRUE(first);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "root-cert.pem"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "root-key.pem"));
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() / "root-key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);

  auto second = must_load(dir.path());
  ASSERT_TRUE(second);
  EXPECT_EQ(X509_cmp(first->root(), second->root()), 0);
  EXPECT_EQ(first->root_pem(), second->root_pem());
}

TEST(LocalCa, RootHasCaShape) {
  TempDir dir;
  auto ca = must_load(dir.path());
  ASSERT_TRUE(ca);
  X509* root = ca->root();
  EXPECT_EQ(X509_check_ca(root), 1);
  EXPECT_TRUE(X509_get_extended_key_usage(root) == UINT32_MAX);  // no EKU on the root
  EXPECT_EQ(X509_get_key_usage(root), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  char cn[64] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(root), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "meshnode local CA");
  // 128-bit serial with the top bit clear: 31 or 32 hex digits.
  EXPECT_GE(serial_hex(root).size(), 31u);
  EXPECT_EQ(EVP_PKEY_get_base_id(X509_get0_pubkey(root)), EVP_PKEY_EC);
}

TEST(LocalCa, ConcurrentCreatorsEndWithOneRoot) {
  TempDir dir;
  std::vector<std::future<std::string>> racers;
  for (int i = 0; i < 4; ++i) {
    racers.push_back(std::async(std::launch::async, [&] {
      auto ca = LocalCa::load_or_create(dir.path());
      return ca ? (*ca)->root_pem() : "error: " + ca.error().message();
    }));
  }
  std::string first = racers[0].get();
  ASSERT_FALSE(first.starts_with("error")) << first;
  for (size_t i = 1; i < racers.size(); ++i) EXPECT_EQ(racers[i].get(), first);
}

TEST(LocalCa, HalfPresentFilesNameTheFile) {
  for (const char* keep : {"root-cert.pem", "root-key.pem"}) {
    TempDir dir;
    ASSERT_TRUE(must_load(dir.path()));
    const char* removed = std::string(keep) == "root-cert.pem" ? "root-key.pem" : "root-cert.pem";
    std::filesystem::remove(dir.path() / removed);
    auto ca = LocalCa::load_or_create(dir.path());
    ASSERT_FALSE(ca);
    EXPECT_EQ(ca.error().code, base::Errc::kCertificate);
    EXPECT_NE(ca.error().context.find(removed), std::string::npos) << ca.error().context;
    EXPECT_NE(ca.error().context.find(keep), std::string::npos) << ca.error().context;
  }
}

TEST(LocalCa, MismatchedKeyNamesTheKeyFile) {
  TempDir a;
  TempDir b;
  ASSERT_TRUE(must_load(a.path()));
  ASSERT_TRUE(must_load(b.path()));
  std::filesystem::copy_file(b.path() / "root-key.pem", a.path() / "root-key.pem",
                             std::filesystem::copy_options::overwrite_existing);
  auto ca = LocalCa::load_or_create(a.path());
  ASSERT_FALSE(ca);
  EXPECT_EQ(ca.error().code, base::Errc::kCertificate);
  EXPECT_NE(ca.error().context.find("root-key.pem"), std::string::npos) << ca.error().context;
}

TEST(LocalCa, GarbageCertificateNamesTheFile) {
  TempDir dir;
  ASSERT_TRUE(must_load(dir.path()));
  std::ofstream(dir.path() / "root-cert.pem", std::ios::trunc) << "not a certificate\n";
  auto ca = LocalCa::load_or_create(dir.path());
  ASSERT_FALSE(ca);
  EXPECT_EQ(ca.error().code, base::Errc::kCertificate);
  EXPECT_NE(ca.error().context.find("root-cert.pem"), std::string::npos) << ca.error().context;
}

TEST(LocalCa, IssuedLeafHasUriSanAndChainsToRoot) {
  TempDir dir;
  auto ca = LocalCa::load_or_create(dir.path(), 1h);
  ASSERT_TRUE(ca) << ca.error().message();
  auto id = spiffe("cluster.local", "default", "productpage");
  auto ck = (*ca)->issue(id);
  ASSERT_TRUE(ck) << ck.error().message();

  EXPECT_EQ(ck->identity, id);
  EXPECT_EQ(uri_sans(ck->leaf.get()), std::vector<std::string>{id.to_string()});
  int critical = -1;
  GeneralNamesPtr san(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(ck->leaf.get(), NID_subject_alt_name, &critical, nullptr)));
  EXPECT_EQ(critical, 1);
  EXPECT_EQ(X509_NAME_entry_count(X509_get_subject_name(ck->leaf.get())), 0);
  EXPECT_EQ(X509_check_ca(ck->leaf.get()), 0);
  EXPECT_EQ(X509_get_extended_key_usage(ck->leaf.get()),
            static_cast<uint32_t>(XKU_SSL_SERVER | XKU_SSL_CLIENT));
  EXPECT_EQ(X509_check_private_key(ck->leaf.get(), ck->key.get()), 1);
  EXPECT_TRUE(ck->chain.empty());
  ASSERT_EQ(ck->roots.size(), 1u);
  EXPECT_EQ(X509_cmp(ck->roots[0].get(), (*ca)->root()), 0);

  auto lifetime = ck->not_after - ck->not_before;
  EXPECT_GE(lifetime, 1h + 59s);
  EXPECT_LE(lifetime, 1h + 61s);
  EXPECT_NE(ck->leaf_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(ck->serial_hex, serial_hex(ck->leaf.get()));

  X509StorePtr store(X509_STORE_new());
  ASSERT_EQ(X509_STORE_add_cert(store.get(), (*ca)->root()), 1);
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  ASSERT_EQ(X509_STORE_CTX_init(ctx.get(), store.get(), ck->leaf.get(), nullptr), 1);
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  EXPECT_EQ(X509_verify_cert(ctx.get()), 1)
      << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
}

TEST(LocalCa, EachIssueHasFreshKeyAndSerial) {
  TempDir dir;
  auto ca = must_load(dir.path());
  ASSERT_TRUE(ca);
  auto id = spiffe("cluster.local", "ns", "sa");
  auto a = ca->issue(id);
  auto b = ca->issue(id);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->serial_hex, b->serial_hex);
  EXPECT_NE(EVP_PKEY_eq(a->key.get(), b->key.get()), 1);
}

}  // namespace
}  // namespace meshnode::tls
