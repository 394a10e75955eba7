#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

/// A workload certificate with its private key and the roots its peers must chain to.
/// Move-only (owns OpenSSL objects). Immutable once built; share it read-only across threads.
struct CertifiedKey {
  base::SpiffeId identity;     ///< the identity the leaf certifies (its first URI SAN)
  X509Ptr leaf;                ///< end-entity certificate, never null
  std::vector<X509Ptr> chain;  ///< intermediates, leaf's issuer first; empty when the root signs
  EvpPkeyPtr key;              ///< private key of `leaf`
  std::vector<X509Ptr> roots;  ///< trust anchors for peers (Istio: last element of the CA response)
  std::chrono::system_clock::time_point not_before;  ///< leaf validity start (second precision)
  std::chrono::system_clock::time_point not_after;   ///< leaf validity end (second precision)
  std::string leaf_pem;                              ///< PEM of `leaf`, for /config_dump
  std::string serial_hex;                            ///< leaf serial, lowercase hex without leading zeros
};

/// Fills the derived fields of `ck` (identity from the first URI SAN, validity, leaf_pem,
/// serial_hex) from `ck.leaf`. Errc::kCertificate when the leaf has no SPIFFE URI SAN or unreadable
/// validity times. Used by providers after they obtained leaf/chain/key/roots.
[[nodiscard]] Result<void> fill_leaf_metadata(CertifiedKey& ck);

/// The seam where certificates come from: the built-in `LocalCa`, later the Istio CA client
/// (CSR over gRPC). Implementations must be safe to call from several threads at once.
class CertificateProvider {
 public:
  virtual ~CertificateProvider();

  /// Issues a fresh key and certificate for `id` (a new key each call, as Istio does).
  /// @returns a CertifiedKey whose identity equals `id`; Errc::kCertificate when issuing fails.
  /// May block (key generation, network); never call it from a data worker thread.
  [[nodiscard]] virtual Result<CertifiedKey> issue(const base::SpiffeId& id) = 0;
};

}  // namespace meshnode::tls
