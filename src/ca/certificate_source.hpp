#pragma once

#include <functional>
#include <memory>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/certificate.hpp"

namespace meshnode::ca {

using base::Result;

/// Where workload certificates come from, asynchronously: istiod's CA (IstioCaClient) or the
/// built-in CA (ProviderSource over tls::LocalCa, the default when CA_ADDRESS is unset).
class CertificateSource {
 public:
  using Done = std::function<void(Result<tls::CertifiedKey>)>;
  virtual ~CertificateSource();

  /// Requests a fresh key and certificate for `id`; `done` runs exactly once, on the source's own
  /// thread or inline, with a CertifiedKey whose identity is `id`, or Errc::kCertificate naming
  /// the identity and the cause. Thread-safe.
  virtual void request(const base::SpiffeId& id, Done done) = 0;
};

/// Adapts a synchronous tls::CertificateProvider (the built-in LocalCa: a local ECDSA signature,
/// about a millisecond): request() issues inline on the caller's thread.
class ProviderSource final : public CertificateSource {
 public:
  explicit ProviderSource(std::unique_ptr<tls::CertificateProvider> provider)
      : provider_(std::move(provider)) {}
  void request(const base::SpiffeId& id, Done done) override { done(provider_->issue(id)); }

 private:
  std::unique_ptr<tls::CertificateProvider> provider_;
};

}  // namespace meshnode::ca
