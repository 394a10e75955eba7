#pragma once

#include <span>
#include <string>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

/// The peer's identity after a completed handshake: the first URI SAN of its leaf certificate.
/// @returns Errc::kIdentityMismatch when there is no peer certificate, no URI SAN, or the first
///          URI SAN is not an Istio SPIFFE id; Errc::kTlsHandshake when chain verification did not
///          succeed (fails closed if a caller ever disables SSL_VERIFY_PEER).
/// Reads only `ssl`; call from the thread that owns the connection.
[[nodiscard]] Result<base::SpiffeId> peer_identity(const SSL* ssl);

/// Client-side HBONE identity check (research §2.1): succeeds when SOME URI SAN of the peer leaf
/// equals one of `expected`, and returns that identity. DNS and IP SANs are ignored.
/// @returns Errc::kIdentityMismatch with "identity verification error: peer did not present the
///          expected SAN ([spiffe://...]), got [spiffe://...]" otherwise, including when `expected`
///          is empty (fails closed); Errc::kTlsHandshake when chain verification did not succeed.
/// Reads only `ssl`; call from the thread that owns the connection.
[[nodiscard]] Result<base::SpiffeId> verify_server_identity(const SSL* ssl,
                                                            std::span<const base::SpiffeId> expected);

/// Why the peer certificate was rejected during this connection's handshake on a server context
/// from `make_server_context`: "<X509 verify error string>[: <our reason>]", e.g.
/// "application verification failure: client trust domain 'evil.org' does not match 'cluster.local'".
/// "peer did not return a certificate" when the handshake stopped without a peer certificate;
/// empty when verification succeeded or the handshake has not reached it yet.
std::string verify_failure_reason(const SSL* ssl);

/// Internal to the tls library: records `reason` on `ssl` for `verify_failure_reason`.
/// The string is owned by the SSL object and freed with it. Not for use outside src/tls.
void set_verify_failure_reason(SSL* ssl, std::string reason);

}  // namespace meshnode::tls
