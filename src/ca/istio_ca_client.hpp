#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ca/certificate_source.hpp"
#include "rpc/endpoint.hpp"

namespace meshnode::ca {

/// Settings of the Istio CA client, named as the reference's env vars (research §2.4, §3.1).
struct IstioCaOptions {
  rpc::Endpoint endpoint;  ///< CA_ADDRESS, CA_ROOT_CA, ALT_CA_HOSTNAME, AUTH_TOKEN, CLUSTER_ID, CA_HEADER_*
  /// SECRET_TTL (default 24h): IstioCertificateRequest.validity_duration, in seconds.
  std::chrono::seconds ttl{86'400};
  /// Shared (in-pod) mode asks for other workloads' identities: ImpersonatedIdentity metadata.
  bool shared_mode = true;
  /// Per-call deadline.
  std::chrono::milliseconds call_timeout{10'000};

  /// From the environment (PROXY_MODE decides shared_mode). nullopt when CA_ADDRESS is unset or
  /// empty: the built-in CA is used. Errc::kConfig for a bad address or SECRET_TTL.
  [[nodiscard]] static Result<std::optional<IstioCaOptions>> from_env(const rpc::Env& env);
};

/// Turns an IstioCertificateResponse.cert_chain (research §2.4: [0] leaf, [1..n-2] intermediates,
/// [n-1] root bundle that may hold several roots) into a CertifiedKey for `key`.
/// @returns Errc::kCertificate when the chain is empty or has no root element, a PEM element does
///          not parse, the leaf does not match `key`, the leaf's SPIFFE id is not `requested`, or
///          the leaf does not verify through the intermediates to one of the roots. Pure.
[[nodiscard]] Result<tls::CertifiedKey> certified_key_from_chain(const std::vector<std::string>& chain,
                                                                 tls::EvpPkeyPtr key,
                                                                 const base::SpiffeId& requested);

/// Istio CA client: `IstioCertificateService/CreateCertificate` over gRPC (TLS to CA_ADDRESS) with a
/// fresh P-256 key and CSR per request, the call metadata of the endpoint (token re-read per call),
/// and the chain checks of certified_key_from_chain. Calls run on the client's own gRPC thread;
/// `done` runs there. Thread-safe.
class IstioCaClient final : public CertificateSource {
 public:
  /// Builds the channel (reads the root CA file). Errc::kConfig / Errc::kIo from rpc::make_channel.
  [[nodiscard]] static Result<std::unique_ptr<IstioCaClient>> create(IstioCaOptions options);
  /// Cancels calls in flight (their `done` gets Errc::kCertificate "cancelled") and joins the thread.
  ~IstioCaClient() override;

  /// Generates the key and CSR on the caller's thread, then calls the CA asynchronously.
  void request(const base::SpiffeId& id, Done done) override;

  struct Impl;

 private:
  explicit IstioCaClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::ca
