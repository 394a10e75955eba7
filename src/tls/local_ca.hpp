#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tls/certificate.hpp"

namespace meshnode::tls {

/// The built-in CA used when there is no istiod: one self-signed ECDSA P-256 root kept on disk,
/// issuing short-lived workload leaves for any SPIFFE identity asked for.
class LocalCa final : public CertificateProvider {
  struct Private {};

 public:
  /// Root certificate file name inside the CA directory (PEM; first certificate is the signer).
  static constexpr const char* kRootCertFile = "root-cert.pem";
  /// Root private key file name inside the CA directory (PEM, written with mode 0600).
  static constexpr const char* kRootKeyFile = "root-key.pem";

  /// Loads `dir/root-cert.pem` + `dir/root-key.pem`, or, when BOTH are absent, generates a root
  /// (ECDSA P-256, CN "meshnode local CA", O "cluster.local", CA:TRUE critical, keyCertSign+cRLSign,
  /// 10 years, random 128-bit serial) and writes it (temp file + rename; key mode 0600). Creation is
  /// serialised with flock(2) on `dir/.root-ca.lock`, so processes or threads racing on the same
  /// empty directory all end up with the winner's root. `dir` is created if missing.
  /// @param leaf_validity lifetime of issued leaves (counted from now; notBefore is backdated 1 min).
  /// @returns Errc::kCertificate naming the file when exactly one file is present, a file is
  ///          unreadable or malformed, the root is not a CA, or the key does not match the cert;
  ///          Errc::kIo when the directory or lock cannot be created.
  /// Blocking file I/O: call at startup or on the control thread.
  [[nodiscard]] static Result<std::unique_ptr<LocalCa>> load_or_create(
      const std::filesystem::path& dir, std::chrono::seconds leaf_validity = std::chrono::hours(24));

  /// Issues an ECDSA P-256 leaf for `id`: empty subject, critical URI SAN = id.to_string(),
  /// digitalSignature+keyEncipherment, serverAuth+clientAuth, CA:FALSE, validity
  /// [now - 1 min, now + leaf_validity], random 128-bit serial; chain empty, roots = {our root}.
  /// Errc::kCertificate when OpenSSL fails. Thread-safe (serialised by an internal mutex).
  [[nodiscard]] Result<CertifiedKey> issue(const base::SpiffeId& id) override;

  /// Test hook: a leaf like `issue` but with exactly `uri_sans` (any text, any count) and the
  /// validity [not_before, not_after] (e.g. expired); `identity` is stored as given (not derived),
  /// so certificates our own code would refuse can be presented. Errc::kCertificate on failure.
  [[nodiscard]] Result<CertifiedKey> issue_for_test(const std::vector<std::string>& uri_sans,
                                                    const base::SpiffeId& identity,
                                                    std::chrono::system_clock::time_point not_before,
                                                    std::chrono::system_clock::time_point not_after);
  /// The root certificate (owned by this object). Immutable; safe to read from any thread.
  [[nodiscard]] X509* root() const noexcept { return root_.get(); }
  /// PEM text of the root certificate.
  [[nodiscard]] std::string root_pem() const { return to_pem(root_.get()); }

  /// Use `load_or_create`; public only for std::make_unique (the tag type is private).
  LocalCa(Private, X509Ptr root, EvpPkeyPtr root_key, std::chrono::seconds leaf_validity);

 private:
  std::mutex mu_;  // OpenSSL signing with one shared key is documented safe; cheap insurance anyway
  X509Ptr root_;
  EvpPkeyPtr root_key_;
  std::chrono::seconds leaf_validity_;
};

}  // namespace meshnode::tls
