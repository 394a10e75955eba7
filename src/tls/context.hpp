#pragma once

#include "base/error.hpp"
#include "tls/certificate.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

/// Builds the SSL_CTX a 15008 listener uses for one workload identity (HBONE server side).
/// Settings (DESIGN §2, research §2.1): TLS 1.3 only; ciphersuites TLS_AES_128_GCM_SHA256 and
/// TLS_AES_256_GCM_SHA384 (ztunnel's two), AES-128 preferred on both sides (the server's order
/// decides): about a third less CPU per byte, the same 128-bit security target; groups X25519, P-256, P-384; no session cache or tickets (no
/// resumption); ALPN: a client offering protocols without "h2" gets a fatal no_application_protocol
/// alert (a client offering none proceeds without ALPN, as rustls does); presents `ck.leaf` + `ck.chain`;
/// requires a client certificate chaining to `ck.roots` whose first URI SAN is a SPIFFE id in the
/// same trust domain as `ck.identity` — otherwise the handshake fails and `verify_failure_reason`
/// explains why. Buffers are released while a connection is idle.
/// @returns Errc::kTlsHandshake when OpenSSL rejects a setting, Errc::kCertificate when the
///          key does not match the leaf or `ck.roots` is empty.
/// The context holds its own references to the certificates and key; `ck` may be destroyed after.
/// The returned context is safe to share between threads for SSL_new.
[[nodiscard]] Result<SslCtxPtr> make_server_context(const CertifiedKey& ck);

/// Builds the SSL_CTX for outbound HBONE connections made on behalf of `ck.identity`.
/// Same protocol settings as the server; offers ALPN "h2"; presents `ck.leaf` + `ck.chain`;
/// verifies the server chain against `ck.roots` (no hostname check, callers send no SNI). The
/// peer's identity is NOT checked here: call `verify_server_identity` after the handshake.
/// @returns as `make_server_context`. Thread-safety as `make_server_context`.
[[nodiscard]] Result<SslCtxPtr> make_client_context(const CertifiedKey& ck);

}  // namespace meshnode::tls
