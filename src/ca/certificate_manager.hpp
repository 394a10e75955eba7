#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/spiffe.hpp"
#include "ca/certificate_source.hpp"
#include "state/snapshot.hpp"
#include "tls/cert_manager.hpp"

namespace meshnode::ca {

/// Who is waiting for a certificate, highest first (research §2.4): a connection, a prefetch for a
/// workload on this node, a refresh of a certificate that still serves.
enum class Priority { kRealTime = 0, kWarmup = 1, kBackground = 2 };

/// Lifecycle knobs (research §2.4 defaults).
struct ManagerOptions {
  std::size_t max_in_flight = 8;                   ///< concurrent CSRs
  std::chrono::milliseconds initial_backoff{500};  ///< first retry after a failure
  std::chrono::milliseconds max_backoff{150'000};  ///< retry cap
  double jitter = 0.2;                             ///< ±20 % on every retry delay
  std::string node_name;                           ///< NODE_NAME: prefetch/forget scope; "" = off
};

/// One row of /config_dump's certificates section.
struct CertificateStatus {
  std::string identity;  ///< "spiffe://td/ns/ns/sa/sa"
  /// "Initializing" (no certificate yet, first request pending), "Available", or
  /// "Unavailable: <reason>" (no usable certificate: the last error, or "expired at <t>").
  std::string state;
  std::string serial_hex;        ///< of the current leaf ("" if none)
  std::string not_before;        ///< RFC 3339 UTC ("" if none)
  std::string not_after;         ///< RFC 3339 UTC ("" if none)
  std::string refresh_at;        ///< when the next request is due (RFC 3339 UTC)
  std::size_t chain_length = 0;  ///< certificates presented: leaf + intermediates
  std::size_t roots = 0;         ///< trust anchors from the root bundle
  std::uint32_t failures = 0;    ///< consecutive failed requests
  std::string last_error;        ///< of the last failed request ("" after a success)
};

/// Per-identity workload certificates with Istio's lifecycle (research §2.4): issue on first use or
/// prefetch, refresh at half the lifetime, retry failures with exponential backoff (500 ms → 150 s,
/// ±20 % jitter), at most `max_in_flight` requests at once chosen by Priority, prefetch for HBONE
/// workloads on this node and forget identities whose last workload left it. A still-valid
/// certificate keeps serving while renewal fails; an expired one is never returned.
///
/// Threads: one scheduler thread ("cert-manager") starts requests; the source completes them on its
/// own thread. Every public method is thread-safe and non-blocking. get() is the data-path fast
/// path: it reads an immutable snapshot of the issued certificates (an atomic shared_ptr swapped
/// whenever a certificate is issued or forgotten), takes no mutex and does no I/O when the
/// identity has a valid certificate. A connection with none waits in fetch() as a callback (no
/// thread blocks while the CA issues). Callbacks run on the source's thread (or the scheduler's):
/// callers post them to their own executor.
class CertificateManager final : public tls::IdentitySource {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  explicit CertificateManager(std::unique_ptr<CertificateSource> source, ManagerOptions options = {},
                              Clock clock = {});
  /// Stops the scheduler, then the source (its in-flight completions still land here safely).
  ~CertificateManager() override;
  CertificateManager(const CertificateManager&) = delete;
  CertificateManager& operator=(const CertificateManager&) = delete;

  /// The current certificate for `id` if it is valid now. Errors (Errc::kCertificate), naming the
  /// identity: none issued yet ("no certificate yet for <id>"), none could be issued ("no
  /// certificate for <id>: <last error>"), or "certificate for <id> expired at <t>" — connections
  /// then fail closed with that reason.
  [[nodiscard]] Result<Tls> get(const base::SpiffeId& id) const;
  /// IdentitySource: get().
  [[nodiscard]] Result<Tls> current(const base::SpiffeId& id) override { return get(id); }

  /// A connection needs `id`: `done` gets the certificate (at once when one is valid), or the
  /// error of the first request that fails while no valid certificate exists. While a failed
  /// identity waits out its retry backoff, `done` gets the last error at once (fail closed
  /// without adding load on a struggling CA).
  void fetch(const base::SpiffeId& id, Done done) override;

  /// Requests `id` ahead of use (priority Warmup) unless it is already held or pending.
  void prefetch(const base::SpiffeId& id);

  /// Applies NODE_NAME scoping: prefetches each HBONE workload's identity on this node and forgets
  /// the identities (prefetched earlier) that no workload on this node uses any more.
  void update_workloads(const state::StateSnapshot& snapshot);

  /// Drops `id` (its pending waiters get Errc::kCertificate "forgotten").
  void forget(const base::SpiffeId& id);

  /// Every identity, sorted. Thread-safe copy.
  [[nodiscard]] std::vector<CertificateStatus> dump() const;

 private:
  struct Entry {
    Tls cert;
    std::string last_error;
    std::uint32_t failures = 0;
    bool pending = false;    // wants a request
    bool in_flight = false;  // a request is out
    Priority priority = Priority::kBackground;
    std::uint64_t order = 0;  // FIFO among equal priorities
    std::uint64_t generation = 0;
    std::chrono::system_clock::time_point due{};  // next refresh or retry; max() = none
    std::vector<Done> waiters;
  };

  /// Issued certificates as of the last publish(): what get() reads without the mutex.
  using Published = std::map<base::SpiffeId, Tls>;

  void run();
  /// Rebuilds `published_` from `entries_`. Call with mu_ held, after a certificate changed.
  void publish();
  void want(Entry& e, Priority p);
  void completed(const base::SpiffeId& id, std::uint64_t generation, Result<tls::CertifiedKey> result);
  [[nodiscard]] std::chrono::milliseconds retry_delay(std::uint32_t failures);
  [[nodiscard]] Result<Tls> usable(const base::SpiffeId& id, const Entry& e,
                                   std::chrono::system_clock::time_point now) const;

  std::unique_ptr<CertificateSource> source_;
  ManagerOptions options_;
  Clock clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<base::SpiffeId, Entry> entries_;      // guarded by mu_
  std::set<base::SpiffeId> node_identities_;     // guarded by mu_
  std::size_t in_flight_ = 0;                    // guarded by mu_
  std::uint64_t next_order_ = 1;                 // guarded by mu_
  std::uint64_t next_generation_ = 1;            // guarded by mu_
  std::mt19937_64 rng_{std::random_device{}()};  // guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
  std::atomic<std::shared_ptr<const Published>> published_{std::make_shared<const Published>()};
  std::thread thread_;
};

}  // namespace meshnode::ca
