#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "fakes/test_ca.hpp"

namespace meshnode::fakes {

/// One CreateCertificate call the fake received.
struct RecordedCsr {
  std::string identity;                              ///< the CSR's URI SAN ("" when the CSR was refused)
  std::string impersonated;                          ///< metadata ImpersonatedIdentity ("" when absent)
  std::int64_t validity_seconds = 0;                 ///< validity_duration as requested
  std::string serial_hex;                            ///< of the issued leaf ("" when refused or failing)
  std::multimap<std::string, std::string> metadata;  ///< call metadata, lower-case keys
};

/// A programmable Istio CA (istiod's `IstioCertificateService/CreateCertificate`, research §2.4)
/// over real gRPC + TLS: signs CSRs with a TestCa for the requested validity or a lifetime the
/// test chooses, checks ImpersonatedIdentity against the CSR, records every call, fails on demand
/// (UNAVAILABLE) and stops/restarts on the same port. Thread-safe.
class FakeCaServer {
 public:
  [[nodiscard]] static base::Result<std::unique_ptr<FakeCaServer>> start(
      std::shared_ptr<TestCa> ca, std::string server_name = "istiod.istio-system.svc",
      std::string host = "127.0.0.1", int port = 0);
  ~FakeCaServer();

  [[nodiscard]] std::string address() const;
  /// Issue certificates of `lifetime` regardless of the requested validity (nullopt: as requested).
  void set_lifetime(std::optional<std::chrono::seconds> lifetime);
  /// While true every call fails with UNAVAILABLE "fake CA: failing on purpose".
  void set_failing(bool failing);
  [[nodiscard]] std::vector<RecordedCsr> calls() const;
  /// Waits until at least `n` calls were received. Errc::kTimeout otherwise.
  [[nodiscard]] base::Result<void> wait_calls(std::size_t n, std::chrono::steady_clock::time_point deadline);

  void stop();
  [[nodiscard]] base::Result<void> restart();

  struct Impl;

 private:
  explicit FakeCaServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::fakes
