#include "tls/ossl.hpp"

#include <gtest/gtest.h>
#include <openssl/err.h>

#include "tls/local_ca.hpp"
#include "tls_test_util.hpp"

namespace meshnode::tls {
namespace {

using testing::spiffe;
using testing::TempDir;

TEST(Ossl, OpenSslErrorsDrainsTheQueue) {
  EXPECT_EQ(openssl_errors(), "");
  EXPECT_FALSE(private_key_from_pem("garbage"));  // pushes and drains errors itself
  EXPECT_EQ(ERR_peek_error(), 0u);
  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);
  std::string text = openssl_errors();
  // The reason text needs libssl's strings loaded; the packed code is always there.
  EXPECT_NE(text.find("0A00010F"), std::string::npos) << text;
  EXPECT_EQ(openssl_errors(), "");
}

TEST(Ossl, PemRoundTripsAndConcatenatedBundles) {
  TempDir dir;
  auto ca = LocalCa::load_or_create(dir.path());
  ASSERT_TRUE(ca);
  auto ck = (*ca)->issue(spiffe("cluster.local", "a", "b"));
  ASSERT_TRUE(ck);
  auto bundle = certificates_from_pem(ck->leaf_pem + (*ca)->root_pem());
  ASSERT_TRUE(bundle) << bundle.error().message();
  ASSERT_EQ(bundle->size(), 2u);
  EXPECT_EQ(X509_cmp((*bundle)[0].get(), ck->leaf.get()), 0);
  EXPECT_EQ(X509_cmp((*bundle)[1].get(), (*ca)->root()), 0);

  auto key = private_key_from_pem(to_pem(ck->key.get()));
  ASSERT_TRUE(key);
  EXPECT_EQ(EVP_PKEY_eq(key->get(), ck->key.get()), 1);

  EXPECT_FALSE(certificates_from_pem(""));
  auto truncated = certificates_from_pem(ck->leaf_pem.substr(0, ck->leaf_pem.size() / 2));
  ASSERT_FALSE(truncated);
  EXPECT_EQ(truncated.error().code, base::Errc::kCertificate);
}

TEST(Ossl, UriSansAndSerial) {
  TempDir dir;
  auto ca = LocalCa::load_or_create(dir.path());
  ASSERT_TRUE(ca);
  EXPECT_TRUE(uri_sans((*ca)->root()).empty());
  std::string serial = serial_hex((*ca)->root());
  EXPECT_NE(serial.front(), '0');
  EXPECT_EQ(serial.find_first_not_of("0123456789abcdef"), std::string::npos) << serial;
}

}  // namespace
}  // namespace meshnode::tls
