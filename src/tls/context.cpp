#include "tls/context.hpp"

#include <memory>
#include <string_view>

#include "tls/crl.hpp"
#include "tls/verify.hpp"

namespace meshnode::tls {
namespace {

// ztunnel's two suites; AES-128 first because it costs ~30 % less CPU per byte (measured in
// bench/), and SSL_OP_CIPHER_SERVER_PREFERENCE makes our order win when a peer lists AES-256 first.
constexpr const char* kCiphersuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";
constexpr const char* kGroups = "X25519:P-256:P-384";
constexpr std::string_view kAlpnH2 = "h2";
// Wire form of the ALPN list: one length-prefixed entry.
constexpr unsigned char kAlpnWire[] = {2, 'h', '2'};

void free_string(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
                 void* /*argp*/) {
  std::unique_ptr<std::string>(static_cast<std::string*>(ptr)).reset();
}

// Our trust domain, owned by the SSL_CTX (freed with it) and handed to the verify callback.
int trust_domain_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_string);
  return index;
}

// Returning SSL_TLSEXT_ERR_ALERT_FATAL makes OpenSSL send no_application_protocol and fail.
int select_h2(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
              unsigned int inlen, void* /*arg*/) {
  unsigned int pos = 0;
  while (pos < inlen) {
    unsigned int len = in[pos];
    if (len == 0 || pos + 1 + len > inlen) break;  // malformed list
    std::string_view proto(reinterpret_cast<const char*>(in + pos + 1), len);
    if (proto == kAlpnH2) {
      *out = in + pos + 1;
      *outlen = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    pos += 1 + len;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

SSL* ssl_of(X509_STORE_CTX* store_ctx) {
  return static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store_ctx, SSL_get_ex_data_X509_STORE_CTX_idx()));
}

// X509 chain verification, then the CRLs of CRL_PATH (a revoked peer is refused on both HBONE
// sides); records why on the SSL for verify_failure_reason.
bool verify_chain(X509_STORE_CTX* store_ctx, SSL* ssl) {
  if (X509_verify_cert(store_ctx) <= 0) {
    int err = X509_STORE_CTX_get_error(store_ctx);
    if (ssl != nullptr) set_verify_failure_reason(ssl, X509_verify_cert_error_string(err));
    return false;
  }
  std::string revoked = chain_revocation_reason(store_ctx);
  if (revoked.empty()) return true;
  X509_STORE_CTX_set_error(store_ctx, X509_V_ERR_CERT_REVOKED);
  if (ssl != nullptr) {
    set_verify_failure_reason(
        ssl, std::string(X509_verify_cert_error_string(X509_V_ERR_CERT_REVOKED)) + ": " + revoked);
  }
  return false;
}

void refuse_application(X509_STORE_CTX* store_ctx, SSL* ssl, const std::string& reason) {
  X509_STORE_CTX_set_error(store_ctx, X509_V_ERR_APPLICATION_VERIFICATION);
  if (ssl != nullptr) {
    set_verify_failure_reason(
        ssl, std::string(X509_verify_cert_error_string(X509_V_ERR_APPLICATION_VERIFICATION)) + ": " + reason);
  }
}

// Client side of HBONE: the leaf must be an X.509-SVID (one URI SAN, a valid SPIFFE ID); which
// identity is acceptable is checked after the handshake (verify_server_identity).
int verify_server(X509_STORE_CTX* store_ctx, void* /*arg*/) {
  SSL* ssl = ssl_of(store_ctx);
  if (!verify_chain(store_ctx, ssl)) return 0;
  auto id = svid_identity(X509_STORE_CTX_get0_cert(store_ctx));
  if (id) return 1;
  refuse_application(store_ctx, ssl, "server " + id.error().context);
  return 0;
}

// Chain verification first, then the HBONE server rule: the client leaf must be an X.509-SVID
// (exactly one URI SAN, a SPIFFE ID without query or fragment) of our trust domain (research
// §2.1). Authorization by identity happens later, in policy.
int verify_client(X509_STORE_CTX* store_ctx, void* arg) {
  SSL* ssl = ssl_of(store_ctx);
  if (!verify_chain(store_ctx, ssl)) return 0;
  const auto& ours = *static_cast<const std::string*>(arg);
  auto id = svid_identity(X509_STORE_CTX_get0_cert(store_ctx));
  std::string reason;
  if (!id) {
    reason = "client " + id.error().context;
  } else if (id->trust_domain != ours) {
    reason = "client trust domain '" + id->trust_domain + "' does not match '" + ours + "'";
  } else {
    return 1;
  }
  refuse_application(store_ctx, ssl, reason);
  return 0;
}

Result<void> check(int rc, const char* what) {
  if (rc != 1) return fail_ossl(Errc::kTlsHandshake, std::string("SSL_CTX: ") + what);
  return {};
}

Result<void> apply_protocol_settings(SSL_CTX* ctx) {
  for (auto r : {check(SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION), "min version"),
                 check(SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION), "max version"),
                 check(SSL_CTX_set_ciphersuites(ctx, kCiphersuites), "ciphersuites"),
                 check(static_cast<int>(SSL_CTX_set1_groups_list(ctx, kGroups)), "groups"),
                 check(SSL_CTX_set_num_tickets(ctx, 0), "num tickets")}) {
    if (!r) return r;
  }
  // No resumption on either side: identities are checked on every connection.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // NO_AUTO_CHAIN: present exactly leaf + ck.chain (research §2.1: never the root); otherwise
  // OpenSSL rebuilds the chain from the trust store and sends the root on every handshake.
  // Not SSL_MODE_RELEASE_BUFFERS: it frees the 64 KiB read buffer and the record write buffer
  // after every record and allocates them again for the next, two large allocations per message
  // (~15 % of the proxy's user CPU in a 64 B ping-pong). A connection gives them back when it goes
  // idle instead (TlsStream::release_idle_buffers, called by the HTTP/2 keepalive).
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_NO_AUTO_CHAIN);
  SSL_CTX_clear_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE);
  return {};
}

Result<void> apply_identity(SSL_CTX* ctx, const CertifiedKey& ck) {
  if (!ck.leaf || !ck.key) return fail(Errc::kCertificate, "certified key without leaf or key");
  if (ck.roots.empty()) return fail(Errc::kCertificate, "certified key without roots");
  if (SSL_CTX_use_certificate(ctx, ck.leaf.get()) != 1 || SSL_CTX_use_PrivateKey(ctx, ck.key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return fail_ossl(Errc::kCertificate, "key does not match leaf for " + ck.identity.to_string());
  }
  for (const auto& cert : ck.chain) {
    if (SSL_CTX_add1_chain_cert(ctx, cert.get()) != 1) {
      return fail_ossl(Errc::kCertificate, "cannot add intermediate");
    }
  }
  X509StorePtr store(X509_STORE_new());
  if (!store) return fail_ossl(Errc::kTlsHandshake, "X509_STORE_new");
  for (const auto& root : ck.roots) {
    if (X509_STORE_add_cert(store.get(), root.get()) != 1) {
      return fail_ossl(Errc::kCertificate, "cannot add root");
    }
  }
  SSL_CTX_set_cert_store(ctx, store.release());  // the context takes ownership
  return {};
}

Result<SslCtxPtr> make_common(const SSL_METHOD* method, const CertifiedKey& ck) {
  SslCtxPtr ctx(SSL_CTX_new(method));
  if (!ctx) return fail_ossl(Errc::kTlsHandshake, "SSL_CTX_new");
  if (auto r = apply_protocol_settings(ctx.get()); !r) return std::unexpected(r.error());
  if (auto r = apply_identity(ctx.get(), ck); !r) return std::unexpected(r.error());
  return ctx;
}

}  // namespace

Result<SslCtxPtr> make_server_context(const CertifiedKey& ck) {
  auto ctx = make_common(TLS_server_method(), ck);
  if (!ctx) return ctx;
  auto trust_domain = std::make_unique<std::string>(ck.identity.trust_domain);
  if (trust_domain_index() < 0 ||
      SSL_CTX_set_ex_data(ctx->get(), trust_domain_index(), trust_domain.get()) != 1) {
    return fail_ossl(Errc::kTlsHandshake, "SSL_CTX_set_ex_data");
  }
  void* arg = trust_domain.release();  // now owned by the context's ex_data
  SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_cert_verify_callback(ctx->get(), verify_client, arg);
  SSL_CTX_set_alpn_select_cb(ctx->get(), select_h2, nullptr);
  return ctx;
}

Result<SslCtxPtr> make_client_context(const CertifiedKey& ck) {
  auto ctx = make_common(TLS_client_method(), ck);
  if (!ctx) return ctx;
  SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_cert_verify_callback(ctx->get(), verify_server, nullptr);
  // Unlike most OpenSSL calls, set_alpn_protos returns 0 on success.
  if (SSL_CTX_set_alpn_protos(ctx->get(), kAlpnWire, sizeof kAlpnWire) != 0) {
    return fail_ossl(Errc::kTlsHandshake, "SSL_CTX_set_alpn_protos");
  }
  return ctx;
}

}  // namespace meshnode::tls
