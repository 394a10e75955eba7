#pragma once

#include <span>
#include <string>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

/// The identity an X.509-SVID carries (SPIFFE X509-SVID spec §2: exactly one URI SAN, a SPIFFE ID
/// with no query or fragment, SPIFFE ID spec §2), as an Istio SPIFFE identity.
/// @returns Errc::kIdentityMismatch with "certificate has no URI SAN", "certificate has N URI SANs
///          (an X.509-SVID has exactly one): [...]" or "certificate identity is not a SPIFFE id:
///          <why>". Pure; any thread.
[[nodiscard]] Result<base::SpiffeId> svid_identity(const X509* cert);

/// The peer's identity after a completed handshake: the one URI SAN of its leaf (svid_identity).
/// @returns Errc::kIdentityMismatch when there is no peer certificate or svid_identity refuses it; Errc::kTlsHandshake when chain verification did not
///          succeed (fails closed if a caller ever disables SSL_VERIFY_PEER).
/// Reads only `ssl`; call from the thread that owns the connection.
[[nodiscard]] Result<base::SpiffeId> peer_identity(const SSL* ssl);

/// Client-side HBONE identity check (research §2.1): succeeds when the peer leaf is an X.509-SVID
/// (svid_identity: exactly one URI SAN) whose identity equals one of `expected`, and returns it.
/// DNS and IP SANs are ignored.
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
