#pragma once

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <random>
#include <string>

#include "base/spiffe.hpp"
#include "tls/cert_manager.hpp"
#include "tls/local_ca.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls::testing {

/// A fresh, uniquely named directory under the temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("meshnode-tls-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// A certificate manager over a built-in CA created in `dir` (throws when it cannot be made).
inline std::unique_ptr<CertManager> cert_manager_in(const TempDir& dir) {
  auto ca = LocalCa::load_or_create(dir.path());
  if (!ca) throw std::runtime_error(ca.error().message());
  return std::make_unique<CertManager>(std::move(*ca));
}

inline base::SpiffeId spiffe(std::string td, std::string ns, std::string sa) {
  return base::SpiffeId{std::move(td), std::move(ns), std::move(sa)};
}

enum class Side { kPending, kDone, kFailed };

// Client and server SSL objects joined by an in-memory BIO pair: what one writes the other reads.
struct Connection {
  SslPtr client;
  SslPtr server;
  Side client_state = Side::kPending;
  Side server_state = Side::kPending;

  bool ok() const { return client_state == Side::kDone && server_state == Side::kDone; }
};

inline Side step(SSL* ssl) {
  int rc = SSL_do_handshake(ssl);
  if (rc == 1) return Side::kDone;
  int err = SSL_get_error(ssl, rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return Side::kPending;
  ERR_clear_error();
  return Side::kFailed;
}

// Drives both handshakes in lock-step until neither can make progress. In TLS 1.3 the client
// finishes before the server has judged its certificate, so a client that "finished" then reads
// once to collect the server's verdict (an alert, or nothing when the server accepted it).
inline Connection handshake(SSL_CTX* client_ctx, SSL_CTX* server_ctx, const unsigned char* alpn = nullptr,
                            unsigned alpn_len = 0) {
  Connection c{SslPtr(SSL_new(client_ctx)), SslPtr(SSL_new(server_ctx))};
  BIO* client_bio = nullptr;
  BIO* server_bio = nullptr;
  EXPECT_EQ(BIO_new_bio_pair(&client_bio, 0, &server_bio, 0), 1);
  SSL_set_bio(c.client.get(), client_bio, client_bio);
  SSL_set_bio(c.server.get(), server_bio, server_bio);
  SSL_set_connect_state(c.client.get());
  SSL_set_accept_state(c.server.get());
  if (alpn != nullptr) {
    EXPECT_EQ(SSL_set_alpn_protos(c.client.get(), alpn, alpn_len), 0);
  }
  for (int i = 0; i < 20; ++i) {
    if (c.client_state == Side::kPending) c.client_state = step(c.client.get());
    if (c.server_state == Side::kPending) c.server_state = step(c.server.get());
    if (c.client_state != Side::kPending && c.server_state != Side::kPending) break;
  }
  if (c.client_state == Side::kDone) {
    char byte;
    int rc = SSL_read(c.client.get(), &byte, 1);
    if (rc <= 0 && SSL_get_error(c.client.get(), rc) != SSL_ERROR_WANT_READ) c.client_state = Side::kFailed;
    ERR_clear_error();
  }
  return c;
}

}  // namespace meshnode::tls::testing
