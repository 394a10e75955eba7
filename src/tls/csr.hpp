#pragma once

#include <string>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

/// A PEM PKCS#10 certificate signing request as Istio's node proxy sends to istiod's CA (research
/// §2.4): empty subject, one critical subjectAltName extension holding exactly the URI `id`, signed
/// with `key` (SHA-256). `key` is expected to be a fresh P-256 key (generate_p256_key).
/// @returns Errc::kCertificate when OpenSSL fails. Pure CPU; any thread.
[[nodiscard]] Result<std::string> make_csr_pem(const base::SpiffeId& id, EVP_PKEY* key);

}  // namespace meshnode::tls
