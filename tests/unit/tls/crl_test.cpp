// CRL_PATH enforcement: a revoked peer certificate is refused on both HBONE sides, and the CRL file
// is reloaded when it changes.

#include "tls/crl.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "ca/istio_ca_client.hpp"
#include "fakes/test_ca.hpp"
#include "tls/context.hpp"
#include "tls/verify.hpp"
#include "tls_test_util.hpp"

namespace meshnode::tls {
namespace {

using testing::handshake;
using testing::spiffe;
using testing::TempDir;

struct Issued {
  CertifiedKey ck;
  std::string serial;
};

Issued issue(const fakes::TestCa& ca, const base::SpiffeId& id) {
  auto issued = ca.issue(id, std::chrono::hours(1));
  EXPECT_TRUE(issued) << issued.error().message();
  auto ck = ca::certified_key_from_chain(issued->first.cert_chain, std::move(issued->second), id);
  EXPECT_TRUE(ck) << ck.error().message();
  return {std::move(*ck), issued->first.serial_hex};
}

class Crl : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = fakes::TestCa::create({.intermediate = true});
    ASSERT_TRUE(ca);
    ca_ = *ca;
    server_ = issue(*ca_, spiffe("cluster.local", "default", "reviews"));
    client_ = issue(*ca_, spiffe("cluster.local", "default", "productpage"));
    server_ctx_ = std::move(*make_server_context(server_.ck));
    client_ctx_ = std::move(*make_client_context(client_.ck));
    store_ = std::make_shared<CrlStore>(dir_.path() / "ca-crl.pem");
    set_crl_store(store_);
  }
  void TearDown() override { set_crl_store(nullptr); }

  void write_crl(const std::vector<std::string>& serials) {
    auto pem = ca_->crl_pem(serials);
    ASSERT_TRUE(pem) << pem.error().message();
    std::ofstream(store_->path(), std::ios::trunc) << *pem << "\n";  // size changes with the entries
    auto reloaded = store_->reload_if_changed();
    ASSERT_TRUE(reloaded) << reloaded.error().message();
    EXPECT_TRUE(*reloaded);
  }

  TempDir dir_;
  std::shared_ptr<fakes::TestCa> ca_;
  Issued server_, client_;
  SslCtxPtr server_ctx_, client_ctx_;
  std::shared_ptr<CrlStore> store_;
};

TEST_F(Crl, UnrevokedPeersConnect) {
  write_crl({"1234"});
  EXPECT_TRUE(handshake(client_ctx_.get(), server_ctx_.get()).ok());
}

TEST_F(Crl, RevokedClientIsRefusedByTheServer) {
  write_crl({client_.serial});
  auto c = handshake(client_ctx_.get(), server_ctx_.get());
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(verify_failure_reason(c.server.get()),
            "certificate revoked: certificate serial " + client_.serial + " is revoked by the CRL");
}

TEST_F(Crl, RevokedServerIsRefusedByTheClient) {
  write_crl({server_.serial});
  auto c = handshake(client_ctx_.get(), server_ctx_.get());
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(verify_failure_reason(c.client.get()),
            "certificate revoked: certificate serial " + server_.serial + " is revoked by the CRL");
}

TEST_F(Crl, ReloadedFileTakesEffectForNewHandshakes) {
  write_crl({});
  EXPECT_TRUE(handshake(client_ctx_.get(), server_ctx_.get()).ok());
  EXPECT_FALSE(*store_->reload_if_changed()) << "unchanged file";
  write_crl({client_.serial, server_.serial});
  EXPECT_FALSE(handshake(client_ctx_.get(), server_ctx_.get()).ok());
  // A broken file keeps the previous set.
  std::ofstream(store_->path(), std::ios::trunc)
      << "-----BEGIN X509 CRL-----\ngarbage\n-----END X509 CRL-----\n";
  EXPECT_FALSE(store_->reload_if_changed());
  EXPECT_FALSE(handshake(client_ctx_.get(), server_ctx_.get()).ok());
}

TEST_F(Crl, ACrlFromAnotherIssuerSaysNothing) {
  auto other = fakes::TestCa::create({.intermediate = true});
  auto pem = (*other)->crl_pem({client_.serial});
  std::ofstream(store_->path(), std::ios::trunc) << *pem;
  ASSERT_TRUE(store_->reload_if_changed());
  EXPECT_TRUE(handshake(client_ctx_.get(), server_ctx_.get()).ok());
}

}  // namespace
}  // namespace meshnode::tls
