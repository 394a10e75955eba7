#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/certificate.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

/// Everything a connection needs to speak HBONE as one identity. Immutable once published.
/// An SSL made from `server_ctx`/`client_ctx` holds its own reference to the context, so a
/// connection outlives a certificate rotation safely.
struct IdentityTls {
  base::SpiffeId identity;
  SslCtxPtr server_ctx;  ///< from make_server_context: for the 15008 listener of this identity's pods
  SslCtxPtr client_ctx;  ///< from make_client_context: for outbound HBONE on behalf of this identity
  std::chrono::system_clock::time_point not_before;  ///< leaf validity start
  std::chrono::system_clock::time_point not_after;   ///< leaf validity end
  std::string leaf_pem;                              ///< PEM of the leaf
  std::string serial_hex;                            ///< leaf serial, lowercase hex
  std::vector<std::string> root_pems;                ///< one PEM per root, provider order
  std::size_t chain_length = 1;                      ///< certificates presented: leaf + intermediates
};

/// Where the data path gets the TLS material of an identity: the seam between the HBONE client
/// pool / inbound listener and whichever certificate manager the process runs (ca::CertificateManager
/// over the built-in or the Istio CA; tls::CertManager in unit harnesses). Thread-safe.
class IdentitySource {
 public:
  using Tls = std::shared_ptr<const IdentityTls>;
  using Done = std::function<void(Result<Tls>)>;
  virtual ~IdentitySource() = default;

  /// Fast path, no I/O: the identity's certificate when one is valid now, else Errc::kCertificate
  /// naming the identity (none yet, none could be issued, or expired).
  [[nodiscard]] virtual Result<Tls> current(const base::SpiffeId& id) = 0;

  /// A connection waits for `id`: `done` runs exactly once (inline, or on another thread) with a
  /// valid certificate or the error (Errc::kCertificate naming the identity) — fail closed.
  virtual void fetch(const base::SpiffeId& id, Done done) = 0;
};

/// One row of the `certificates` section of /config_dump (the reference proxy's field meanings).
struct CertInfo {
  std::string identity;                ///< "spiffe://td/ns/ns/sa/sa"
  std::string state;                   ///< "Available" (only cached, issued certificates are listed)
  std::string serial_hex;              ///< leaf serial, lowercase hex
  std::string valid_from;              ///< RFC 3339 UTC, seconds: "2024-05-01T12:00:00Z"
  std::string expiration_time;         ///< RFC 3339 UTC, seconds
  std::string leaf_pem;                ///< PEM of the leaf
  std::vector<std::string> root_pems;  ///< PEM of each root
};

/// RFC 3339 UTC text with second precision, e.g. "2024-05-01T12:00:00Z".
[[nodiscard]] std::string to_rfc3339(std::chrono::system_clock::time_point t);

/// Per-identity TLS contexts for the node: issues on first use, caches, and rotates at half the
/// certificate lifetime (not_before + (not_after - not_before) / 2), lazily on `get`. When rotation
/// fails while the current certificate is still valid, the current one keeps being served and a
/// warning is logged. Thread-safe: one mutex guards the cache; `get` holds it while the provider
/// issues, so with a slow (remote) provider call it from the control thread, not a data worker.
class CertManager final : public IdentitySource {
 public:
  /// Clock seam for tests; must be callable from any thread.
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  /// @param provider where certificates come from; must not be null.
  /// @param clock    "now" for rotation decisions; empty = std::chrono::system_clock::now.
  explicit CertManager(std::unique_ptr<CertificateProvider> provider, Clock clock = {});

  /// The TLS material for `id`, issuing or rotating it when needed.
  /// @returns Errc::kCertificate when issuing fails and no still-valid certificate is cached, or
  ///          the provider returned a certificate for another identity; Errc::kTlsHandshake when a
  ///          context cannot be built. The same pointer is returned until the next rotation.
  [[nodiscard]] Result<std::shared_ptr<const IdentityTls>> get(const base::SpiffeId& id);

  /// IdentitySource: `get`, synchronously (the provider issues inline).
  [[nodiscard]] Result<Tls> current(const base::SpiffeId& id) override { return get(id); }
  void fetch(const base::SpiffeId& id, Done done) override { done(get(id)); }

  /// Snapshot of the cache for /config_dump, ordered by identity. Thread-safe.
  [[nodiscard]] std::vector<CertInfo> dump() const;

 private:
  [[nodiscard]] Result<std::shared_ptr<const IdentityTls>> build(const base::SpiffeId& id);

  std::unique_ptr<CertificateProvider> provider_;
  Clock clock_;
  mutable std::mutex mu_;
  std::map<base::SpiffeId, std::shared_ptr<const IdentityTls>> cache_;  // guarded by mu_
};

}  // namespace meshnode::tls
