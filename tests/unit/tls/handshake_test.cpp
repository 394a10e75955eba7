#include <gtest/gtest.h>
#include <openssl/err.h>

#include <array>
#include <chrono>
#include <vector>
#include <string_view>

#include "tls/context.hpp"
#include "tls/local_ca.hpp"
#include "tls/verify.hpp"
#include "tls_test_util.hpp"

namespace meshnode::tls {
namespace {

using testing::Connection;
using testing::handshake;
using testing::Side;
using testing::spiffe;
using testing::TempDir;

class Handshake : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = LocalCa::load_or_create(dir_.path());
    ASSERT_TRUE(ca) << ca.error().message();
    ca_ = std::move(*ca);
    server_ctx_ = context_for(*ca_, server_id_, /*server=*/true);
    client_ctx_ = context_for(*ca_, client_id_, /*server=*/false);
    ASSERT_TRUE(server_ctx_ && client_ctx_);
  }

  static SslCtxPtr context_for(LocalCa& ca, const base::SpiffeId& id, bool server) {
    auto ck = ca.issue(id);
    EXPECT_TRUE(ck) << ck.error().message();
    if (!ck) return nullptr;
    auto ctx = server ? make_server_context(*ck) : make_client_context(*ck);
    EXPECT_TRUE(ctx) << ctx.error().message();
    return ctx ? std::move(*ctx) : nullptr;
  }

  TempDir dir_;
  std::unique_ptr<LocalCa> ca_;
  base::SpiffeId server_id_ = spiffe("cluster.local", "default", "reviews");
  base::SpiffeId client_id_ = spiffe("cluster.local", "default", "productpage");
  SslCtxPtr server_ctx_;
  SslCtxPtr client_ctx_;
};

TEST_F(Handshake, MutualTls13WithH2AndIdentities) {
  Connection c = handshake(client_ctx_.get(), server_ctx_.get());
  ASSERT_TRUE(c.ok()) << verify_failure_reason(c.server.get());

  EXPECT_EQ(SSL_version(c.client.get()), TLS1_3_VERSION);
  const unsigned char* proto = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(c.client.get(), &proto, &len);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(proto), len), "h2");
  SSL_get0_alpn_selected(c.server.get(), &proto, &len);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(proto), len), "h2");
  EXPECT_STREQ(SSL_get_cipher_name(c.client.get()), "TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(SSL_session_reused(c.client.get()), 0);
  // Each side presents its leaf only (no intermediates here, never the root).
  EXPECT_EQ(sk_X509_num(SSL_get_peer_cert_chain(c.client.get())), 1);
  EXPECT_EQ(sk_X509_num(SSL_get_peer_cert_chain(c.server.get())), 0);  // server's list excludes the leaf

  auto seen_by_server = peer_identity(c.server.get());
  ASSERT_TRUE(seen_by_server) << seen_by_server.error().message();
  EXPECT_EQ(*seen_by_server, client_id_);
  EXPECT_EQ(verify_failure_reason(c.server.get()), "");

  std::array<base::SpiffeId, 2> expected{spiffe("cluster.local", "default", "other"), server_id_};
  auto seen_by_client = verify_server_identity(c.client.get(), expected);
  ASSERT_TRUE(seen_by_client) << seen_by_client.error().message();
  EXPECT_EQ(*seen_by_client, server_id_);
}

// ztunnel (rustls) lists AES-256-GCM first; our server's order decides, so such a client still
// gets AES-128-GCM, and a client offering only AES-256-GCM is still served.
TEST_F(Handshake, ServerOrderPicksAes128EvenWhenClientPrefersAes256) {
  ASSERT_EQ(SSL_CTX_set_ciphersuites(client_ctx_.get(), "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256"), 1);
  Connection both = handshake(client_ctx_.get(), server_ctx_.get());
  ASSERT_TRUE(both.ok());
  EXPECT_STREQ(SSL_get_cipher_name(both.server.get()), "TLS_AES_128_GCM_SHA256");

  ASSERT_EQ(SSL_CTX_set_ciphersuites(client_ctx_.get(), "TLS_AES_256_GCM_SHA384"), 1);
  Connection only256 = handshake(client_ctx_.get(), server_ctx_.get());
  ASSERT_TRUE(only256.ok());
  EXPECT_STREQ(SSL_get_cipher_name(only256.server.get()), "TLS_AES_256_GCM_SHA384");

  ASSERT_EQ(SSL_CTX_set_ciphersuites(client_ctx_.get(), "TLS_CHACHA20_POLY1305_SHA256"), 1);
  EXPECT_FALSE(handshake(client_ctx_.get(), server_ctx_.get()).ok());
}

TEST_F(Handshake, ClientRejectsUnexpectedServerIdentity) {
  Connection c = handshake(client_ctx_.get(), server_ctx_.get());
  ASSERT_TRUE(c.ok());
  std::array<base::SpiffeId, 1> wrong{spiffe("cluster.local", "default", "ratings")};
  auto r = verify_server_identity(c.client.get(), wrong);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, base::Errc::kIdentityMismatch);
  EXPECT_EQ(
      r.error().context,
      "identity verification error: peer did not present the expected SAN "
      "([spiffe://cluster.local/ns/default/sa/ratings]), got [spiffe://cluster.local/ns/default/sa/reviews]");

  auto none = verify_server_identity(c.client.get(), {});
  ASSERT_FALSE(none);  // an empty expectation fails closed
  EXPECT_EQ(none.error().code, base::Errc::kIdentityMismatch);
}

TEST_F(Handshake, ClientWithoutCertificateIsRejected) {
  SslCtxPtr bare(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(bare.get(), TLS1_3_VERSION);
  SSL_CTX_set_verify(bare.get(), SSL_VERIFY_NONE, nullptr);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  Connection c = handshake(bare.get(), server_ctx_.get(), kH2, sizeof kH2);
  EXPECT_EQ(c.server_state, Side::kFailed);
  EXPECT_EQ(c.client_state, Side::kFailed);
  EXPECT_EQ(verify_failure_reason(c.server.get()), "peer did not return a certificate");
}

TEST_F(Handshake, ClientFromAnotherCaIsRejected) {
  TempDir other_dir;
  auto other = LocalCa::load_or_create(other_dir.path());
  ASSERT_TRUE(other);
  auto ck = (*other)->issue(client_id_);
  ASSERT_TRUE(ck);
  // The foreign client trusts our root too, so only the server's check can stop the handshake.
  ck->roots.push_back(share(ca_->root()));
  auto foreign = make_client_context(*ck);
  ASSERT_TRUE(foreign) << foreign.error().message();
  Connection c = handshake(foreign->get(), server_ctx_.get());
  EXPECT_EQ(c.server_state, Side::kFailed);
  EXPECT_EQ(c.client_state, Side::kFailed);
  EXPECT_EQ(verify_failure_reason(c.server.get()), "unable to get local issuer certificate");
}

TEST_F(Handshake, ClientFromAnotherTrustDomainIsRejected) {
  SslCtxPtr evil = context_for(*ca_, spiffe("evil.org", "default", "productpage"), /*server=*/false);
  ASSERT_TRUE(evil);
  Connection c = handshake(evil.get(), server_ctx_.get());
  EXPECT_EQ(c.server_state, Side::kFailed);
  EXPECT_EQ(c.client_state, Side::kFailed);
  std::string reason = verify_failure_reason(c.server.get());
  EXPECT_NE(reason.find("trust domain 'evil.org' does not match 'cluster.local'"), std::string::npos)
      << reason;
}

TEST_F(Handshake, ServerRejectsAlpnWithoutH2) {
  static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  Connection c = handshake(client_ctx_.get(), server_ctx_.get(), kHttp11, sizeof kHttp11);
  EXPECT_EQ(c.server_state, Side::kFailed);
  EXPECT_EQ(c.client_state, Side::kFailed);
}

TEST_F(Handshake, ServerFromAnotherCaIsRejectedByClient) {
  TempDir other_dir;
  auto other = LocalCa::load_or_create(other_dir.path());
  ASSERT_TRUE(other);
  SslCtxPtr foreign_server = context_for(**other, server_id_, /*server=*/true);
  ASSERT_TRUE(foreign_server);
  Connection c = handshake(client_ctx_.get(), foreign_server.get());
  EXPECT_EQ(c.client_state, Side::kFailed);
}

// Issue 11 defect 9: an X.509-SVID has exactly one URI SAN and a SPIFFE ID no query or fragment.
// Before the fix the server took the first SAN (two SANs) and "zcli#frag" as a service account.
class SvidShape : public Handshake {
 protected:
  SslCtxPtr odd_context(const std::vector<std::string>& sans, bool server) {
    const auto now = std::chrono::system_clock::now();
    auto ck = ca_->issue_for_test(sans, server ? server_id_ : client_id_, now - std::chrono::minutes(1),
                                  now + std::chrono::hours(1));
    EXPECT_TRUE(ck) << ck.error().message();
    if (!ck) return nullptr;
    auto ctx = server ? make_server_context(*ck) : make_client_context(*ck);
    EXPECT_TRUE(ctx) << ctx.error().message();
    return ctx ? std::move(*ctx) : nullptr;
  }
  void expect_server_refuses(const std::vector<std::string>& sans, std::string_view why) {
    SslCtxPtr odd = odd_context(sans, /*server=*/false);
    ASSERT_TRUE(odd);
    Connection c = handshake(odd.get(), server_ctx_.get());
    EXPECT_EQ(c.server_state, Side::kFailed);
    EXPECT_EQ(c.client_state, Side::kFailed);
    std::string reason = verify_failure_reason(c.server.get());
    EXPECT_NE(reason.find(why), std::string::npos) << reason;
  }
};

TEST_F(SvidShape, ServerRefusesClientWithTwoUriSans) {
  expect_server_refuses({client_id_.to_string(), "spiffe://cluster.local/ns/kube-system/sa/admin"},
                        "client certificate has 2 URI SANs (an X.509-SVID has exactly one)");
  // Order does not matter: neither SAN is taken.
  expect_server_refuses({"spiffe://cluster.local/ns/kube-system/sa/admin", client_id_.to_string()}, "2 URI SANs");
}

TEST_F(SvidShape, ServerRefusesSpiffeIdWithFragmentOrQuery) {
  expect_server_refuses({"spiffe://cluster.local/ns/default/sa/zcli#frag"}, "no query or fragment");
  expect_server_refuses({"spiffe://cluster.local/ns/default/sa/zcli?x=1"}, "no query or fragment");
}

TEST_F(SvidShape, ClientRefusesServerWithTwoUriSans) {
  SslCtxPtr odd = odd_context({server_id_.to_string(), "spiffe://cluster.local/ns/default/sa/other"}, true);
  ASSERT_TRUE(odd);
  Connection c = handshake(client_ctx_.get(), odd.get());
  EXPECT_EQ(c.client_state, Side::kFailed);
  std::string reason = verify_failure_reason(c.client.get());
  EXPECT_NE(reason.find("server certificate has 2 URI SANs"), std::string::npos) << reason;
}

TEST(SvidIdentity, ExactlyOneValidUriSan) {
  TempDir dir;
  auto ca = LocalCa::load_or_create(dir.path());
  ASSERT_TRUE(ca);
  const auto now = std::chrono::system_clock::now();
  auto issue = [&](std::vector<std::string> sans) {
    return (*ca)->issue_for_test(sans, {}, now, now + std::chrono::hours(1)).value();
  };
  auto one = svid_identity(issue({"spiffe://cluster.local/ns/a/sa/b"}).leaf.get());
  ASSERT_TRUE(one) << one.error().message();
  EXPECT_EQ(one->service_account, "b");
  for (auto sans : {std::vector<std::string>{}, std::vector<std::string>{"spiffe://td/ns/a/sa/b", "spiffe://td/ns/a/sa/c"},
                    std::vector<std::string>{"spiffe://td/ns/a/sa/b#f"}}) {
    auto id = svid_identity(issue(sans).leaf.get());
    EXPECT_FALSE(id) << sans.size();
    if (!id) {
      EXPECT_EQ(id.error().code, base::Errc::kIdentityMismatch);
    }
  }
}

}  // namespace
}  // namespace meshnode::tls
