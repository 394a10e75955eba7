#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/ossl.hpp"

namespace meshnode::fakes {

/// What a signed CSR produced, for assertions.
struct IssuedCertificate {
  std::string identity;  ///< the CSR's URI SAN
  std::string serial_hex;
  /// Istio CA response shape (research §2.4): [0] leaf, [1..n-2] intermediates, [n-1] root bundle.
  std::vector<std::string> cert_chain;
};

/// A test certificate authority (ECDSA P-256): a root, optionally an intermediate that signs the
/// leaves, and optionally a second root shipped in the bundle (multi-root trust, as during an
/// Istio root rotation). Issues gRPC server certificates (DNS SAN), signs workload CSRs like
/// istiod (URI SAN from the CSR, chosen lifetime), and writes CRLs. Thread-safe (immutable after
/// create; signing serialised internally).
class TestCa {
 public:
  struct Options {
    bool intermediate = false;  ///< leaves signed by an intermediate (chain length 3)
    bool second_root = false;   ///< the root bundle carries an extra, unrelated root
  };
  [[nodiscard]] static base::Result<std::shared_ptr<TestCa>> create(Options options);

  /// PEM of the trust bundle: the root, then the extra root when configured.
  [[nodiscard]] std::string root_bundle_pem() const;
  /// PEM of the signing root only.
  [[nodiscard]] std::string root_pem() const;

  /// A server certificate + key (PEM) for `dns_name`, valid for a day, signed by the root.
  [[nodiscard]] base::Result<std::pair<std::string, std::string>> server_certificate(
      std::string_view dns_name) const;

  /// Verifies `csr_pem` (self-signature, exactly one URI SAN) and signs it for `lifetime` from now
  /// (notBefore = now, second precision). Errc::kCertificate naming what is wrong with the CSR.
  [[nodiscard]] base::Result<IssuedCertificate> sign_csr(std::string_view csr_pem,
                                                         std::chrono::seconds lifetime) const;

  /// What a workload gets from istiod: a fresh P-256 key, a CSR for `id` (tls::make_csr_pem, as
  /// meshnode sends it) and the signed chain.
  [[nodiscard]] base::Result<std::pair<IssuedCertificate, tls::EvpPkeyPtr>> issue(
      const base::SpiffeId& id, std::chrono::seconds lifetime) const;

  /// A CRL (PEM) signed by the issuer of the leaves, revoking `serials_hex`.
  [[nodiscard]] base::Result<std::string> crl_pem(const std::vector<std::string>& serials_hex) const;

  struct Impl;
  explicit TestCa(std::unique_ptr<Impl> impl);
  ~TestCa();

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::fakes
