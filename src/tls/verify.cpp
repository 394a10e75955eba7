#include "tls/verify.hpp"

#include <algorithm>
#include <memory>

namespace meshnode::tls {
namespace {

void free_string(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
                 void* /*argp*/) {
  std::unique_ptr<std::string>(static_cast<std::string*>(ptr)).reset();
}

// Per-connection failure reason, owned by the SSL object. SSL_dup would copy the raw pointer, so
// SSL objects of our contexts must never be duplicated (we never do).
int reason_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_string);
  return index;
}

std::string join(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += items[i];
  }
  return out + "]";
}

Result<const X509*> verified_peer(const SSL* ssl) {
  const X509* peer = SSL_get0_peer_certificate(ssl);
  if (peer == nullptr) return fail(Errc::kIdentityMismatch, "peer presented no certificate");
  long result = SSL_get_verify_result(ssl);
  if (result != X509_V_OK) {
    return fail(Errc::kTlsHandshake,
                std::string("peer certificate not verified: ") + X509_verify_cert_error_string(result));
  }
  return peer;
}

}  // namespace

Result<base::SpiffeId> svid_identity(const X509* cert) {
  std::vector<std::string> sans = uri_sans(cert);
  if (sans.empty()) return fail(Errc::kIdentityMismatch, "certificate has no URI SAN");
  // Taking the first of several would let a CA-signed certificate carry an identity a reader of
  // the certificate does not expect; the SVID spec allows exactly one.
  if (sans.size() > 1) {
    return fail(Errc::kIdentityMismatch, "certificate has " + std::to_string(sans.size()) +
                                             " URI SANs (an X.509-SVID has exactly one): " + join(sans));
  }
  auto id = base::SpiffeId::parse(sans.front());
  if (!id) return fail(Errc::kIdentityMismatch, "certificate identity is not a SPIFFE id: " + id.error().context);
  return id;
}

Result<base::SpiffeId> peer_identity(const SSL* ssl) {
  auto peer = verified_peer(ssl);
  if (!peer) return std::unexpected(peer.error());
  auto id = svid_identity(*peer);
  if (!id) return fail(Errc::kIdentityMismatch, "peer " + id.error().context);
  return id;
}

Result<base::SpiffeId> verify_server_identity(const SSL* ssl, std::span<const base::SpiffeId> expected) {
  auto peer = verified_peer(ssl);
  if (!peer) return std::unexpected(peer.error());
  std::vector<std::string> sans = uri_sans(*peer);
  if (sans.size() > 1) {
    return fail(Errc::kIdentityMismatch, "identity verification error: peer certificate has " +
                                             std::to_string(sans.size()) +
                                             " URI SANs (an X.509-SVID has exactly one): " + join(sans));
  }
  std::vector<std::string> wanted;
  wanted.reserve(expected.size());
  for (const auto& id : expected) wanted.push_back(id.to_string());
  // Compare the canonical strings: a SAN that does not even parse can never match.
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (std::find(sans.begin(), sans.end(), wanted[i]) != sans.end()) return expected[i];
  }
  return fail(Errc::kIdentityMismatch,
              "identity verification error: peer did not present the expected SAN (" + join(wanted) +
                  "), got " + join(sans));
}

void set_verify_failure_reason(SSL* ssl, std::string reason) {
  int index = reason_index();
  if (index < 0) return;
  auto owned = std::make_unique<std::string>(std::move(reason));
  // Replace (and free) a reason left by an earlier callback run on the same connection.
  std::unique_ptr<std::string> previous(static_cast<std::string*>(SSL_get_ex_data(ssl, index)));
  if (SSL_set_ex_data(ssl, index, owned.get()) != 1) {
    (void)previous.release();  // still stored in the slot
    return;
  }
  (void)owned.release();
}

std::string verify_failure_reason(const SSL* ssl) {
  int index = reason_index();
  if (index >= 0) {
    if (const auto* reason = static_cast<const std::string*>(SSL_get_ex_data(ssl, index))) return *reason;
  }
  long result = SSL_get_verify_result(ssl);
  if (result != X509_V_OK) return X509_verify_cert_error_string(result);
  // Only once the ClientHello was accepted could a certificate have been due: a TLS 1.2 or
  // plaintext client fails earlier, and OpenSSL's own error (e.g. "unsupported protocol") says why.
  const OSSL_HANDSHAKE_STATE state = SSL_get_state(ssl);
  if (state == TLS_ST_BEFORE || state == TLS_ST_SR_CLNT_HELLO) return {};
  if (SSL_get0_peer_certificate(ssl) == nullptr && !SSL_is_init_finished(ssl)) {
    return "peer did not return a certificate";
  }
  return {};
}

}  // namespace meshnode::tls
