#include "ca/certificate_manager.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "tls/context.hpp"

namespace meshnode::ca {
namespace {

using base::Errc;
using base::fail;
using TimePoint = std::chrono::system_clock::time_point;
constexpr TimePoint kNever = TimePoint::max();

TimePoint half_life(const tls::IdentityTls& t) { return t.not_before + (t.not_after - t.not_before) / 2; }

Result<CertificateManager::Tls> to_tls(tls::CertifiedKey ck) {
  auto server = tls::make_server_context(ck);
  if (!server) return std::unexpected(server.error());
  auto client = tls::make_client_context(ck);
  if (!client) return std::unexpected(client.error());
  auto out = std::make_shared<tls::IdentityTls>();
  out->identity = ck.identity;
  out->server_ctx = std::move(*server);
  out->client_ctx = std::move(*client);
  out->not_before = ck.not_before;
  out->not_after = ck.not_after;
  out->leaf_pem = std::move(ck.leaf_pem);
  out->serial_hex = std::move(ck.serial_hex);
  out->chain_length = 1 + ck.chain.size();
  for (const auto& root : ck.roots) out->root_pems.push_back(tls::to_pem(root.get()));
  return CertificateManager::Tls(std::move(out));
}

}  // namespace

CertificateManager::CertificateManager(std::unique_ptr<CertificateSource> source, ManagerOptions options,
                                       Clock clock)
    : source_(std::move(source)),
      options_(std::move(options)),
      clock_(clock ? std::move(clock) : Clock(&std::chrono::system_clock::now)) {
  thread_ = std::thread([this] { run(); });
}

CertificateManager::~CertificateManager() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  source_.reset();  // cancels what is in flight; completions still find *this alive
}

std::chrono::milliseconds CertificateManager::retry_delay(std::uint32_t failures) {
  double base = static_cast<double>(options_.initial_backoff.count());
  for (std::uint32_t i = 1; i < failures && base < options_.max_backoff.count(); ++i) base *= 2;
  base = std::min(base, static_cast<double>(options_.max_backoff.count()));
  std::uniform_real_distribution<double> spread(1.0 - options_.jitter, 1.0 + options_.jitter);
  return std::chrono::milliseconds(static_cast<long long>(base * spread(rng_)));
}

void CertificateManager::want(Entry& e, Priority p) {
  if (!e.pending || p < e.priority) e.priority = p;
  if (!e.pending) e.order = next_order_++;
  e.pending = true;
}

Result<CertificateManager::Tls> CertificateManager::usable(const base::SpiffeId& id, const Entry& e,
                                                           TimePoint now) const {
  if (e.cert && now < e.cert->not_after) return e.cert;
  const std::string who = id.to_string();
  if (e.cert) {
    return fail(Errc::kCertificate, "certificate for " + who + " expired at " +
                                        tls::to_rfc3339(e.cert->not_after) +
                                        (e.last_error.empty() ? "" : "; renewal failing: " + e.last_error));
  }
  if (!e.last_error.empty())
    return fail(Errc::kCertificate, "no certificate for " + who + ": " + e.last_error);
  return fail(Errc::kCertificate, "no certificate yet for " + who);
}

void CertificateManager::publish() {
  auto next = std::make_shared<Published>();
  for (const auto& [id, e] : entries_) {
    if (e.cert) next->emplace(id, e.cert);
  }
  published_.store(std::move(next), std::memory_order_release);
}

Result<CertificateManager::Tls> CertificateManager::get(const base::SpiffeId& id) const {
  {
    // Fast path: a valid certificate in the published snapshot (no mutex).
    const auto snapshot = published_.load(std::memory_order_acquire);
    if (auto it = snapshot->find(id); it != snapshot->end() && clock_() < it->second->not_after) return it->second;
  }
  // No valid certificate: the error names why, from the entry (under the mutex).
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return fail(Errc::kCertificate, "no certificate yet for " + id.to_string());
  return usable(id, it->second, clock_());
}

void CertificateManager::fetch(const base::SpiffeId& id, Done done) {
  Result<Tls> ready = fail(Errc::kCertificate, "");
  {
    std::lock_guard lock(mu_);
    Entry& e = entries_[id];
    if (e.generation == 0) e.generation = next_generation_++;
    ready = usable(id, e, clock_());
    // While a failed identity waits out its backoff, connections fail fast with the last error
    // instead of each sending the CA another request.
    bool backing_off = e.failures > 0 && !e.in_flight && !e.pending && e.due > clock_();
    if (!ready && !backing_off) {
      e.waiters.push_back(std::move(done));
      want(e, Priority::kRealTime);
      done = nullptr;
    }
  }
  if (done) {
    done(std::move(ready));  // a valid certificate, or the last error while backing off
  } else {
    cv_.notify_all();
  }
}

void CertificateManager::prefetch(const base::SpiffeId& id) {
  {
    std::lock_guard lock(mu_);
    Entry& e = entries_[id];
    if (e.generation != 0) return;  // already known: its own schedule keeps it fresh
    e.generation = next_generation_++;
    want(e, Priority::kWarmup);
  }
  cv_.notify_all();
}

void CertificateManager::forget(const base::SpiffeId& id) {
  std::vector<Done> waiters;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    waiters = std::move(it->second.waiters);
    const bool had_cert = it->second.cert != nullptr;
    entries_.erase(it);  // an in-flight result finds no entry (or a newer generation) and is dropped
    node_identities_.erase(id);
    if (had_cert) publish();
  }
  spdlog::info("certificate forgotten: identity={} (no workload of it on this node)", id.to_string());
  for (auto& w : waiters) w(fail(Errc::kCertificate, "certificate for " + id.to_string() + " forgotten"));
}

void CertificateManager::update_workloads(const state::StateSnapshot& snapshot) {
  if (options_.node_name.empty()) return;
  std::set<base::SpiffeId> now;
  for (const auto& [uid, w] : snapshot.workloads()) {
    if (w->node == options_.node_name && w->protocol == state::TunnelProtocol::kHbone)
      now.insert(w->identity());
  }
  std::vector<base::SpiffeId> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& id : node_identities_) {
      if (!now.contains(id)) gone.push_back(id);
    }
    node_identities_ = now;
  }
  for (const auto& id : now) prefetch(id);
  for (const auto& id : gone) forget(id);
}

void CertificateManager::completed(const base::SpiffeId& id, std::uint64_t generation,
                                   Result<tls::CertifiedKey> result) {
  Result<Tls> built = result ? to_tls(std::move(*result)) : Result<Tls>(std::unexpected(result.error()));
  std::vector<Done> waiters;
  Result<Tls> answer = built;
  {
    std::lock_guard lock(mu_);
    --in_flight_;
    cv_.notify_all();
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.generation != generation) return;
    Entry& e = it->second;
    e.in_flight = false;
    const TimePoint now = clock_();
    if (built) {
      e.cert = *built;
      publish();
      e.failures = 0;
      e.last_error.clear();
      e.due = half_life(*e.cert);
      spdlog::info("certificate issued: identity={} serial={} not_after={} refresh_at={}", id.to_string(),
                   e.cert->serial_hex, tls::to_rfc3339(e.cert->not_after), tls::to_rfc3339(e.due));
    } else {
      ++e.failures;
      e.last_error = built.error().context;
      auto delay = retry_delay(e.failures);
      e.due = now + delay;
      answer = usable(id, e, now);
      spdlog::warn(
          "certificate request failed: identity={} failures={} retry_in_ms={} serving={} error=\"{}\"",
          id.to_string(), e.failures, delay.count(), answer.has_value(), e.last_error);
    }
    waiters = std::move(e.waiters);
  }
  for (auto& w : waiters) w(answer);
}

void CertificateManager::run() {
  pthread_setname_np(pthread_self(), "cert-manager");
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const TimePoint now = clock_();
    TimePoint wake = kNever;
    Entry* best = nullptr;
    const base::SpiffeId* best_id = nullptr;
    for (auto& [id, e] : entries_) {
      if (e.in_flight) continue;
      if (!e.pending && e.due != TimePoint{} && e.due <= now)
        want(e, e.cert ? Priority::kBackground : Priority::kWarmup);
      if (!e.pending && e.due != TimePoint{}) wake = std::min(wake, e.due);
      bool better = best == nullptr || e.priority < best->priority ||
                    (e.priority == best->priority && e.order < best->order);
      if (e.pending && better) {
        best = &e;
        best_id = &id;
      }
    }
    if (best != nullptr && in_flight_ < options_.max_in_flight) {
      best->pending = false;
      best->in_flight = true;
      ++in_flight_;
      base::SpiffeId id = *best_id;
      std::uint64_t generation = best->generation;
      lock.unlock();
      source_->request(id, [this, id, generation](Result<tls::CertifiedKey> r) {
        completed(id, generation, std::move(r));
      });
      lock.lock();
      continue;
    }
    // Wall-clock deadlines (certificate times), re-checked at least once a second.
    auto cap = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    if (wake != kNever) {
      auto until = std::chrono::steady_clock::now() + (wake - now);
      cap = std::min(cap, until);
    }
    cv_.wait_until(lock, cap);
  }
}

std::vector<CertificateStatus> CertificateManager::dump() const {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_();
  std::vector<CertificateStatus> out;
  for (const auto& [id, e] : entries_) {
    CertificateStatus s;
    s.identity = id.to_string();
    auto ok = usable(id, e, now);
    if (ok) {
      s.state = "Available";
    } else if (!e.cert && e.last_error.empty()) {
      s.state = "Initializing";
    } else {
      s.state = "Unavailable: " + ok.error().context;
    }
    if (e.cert) {
      s.serial_hex = e.cert->serial_hex;
      s.not_before = tls::to_rfc3339(e.cert->not_before);
      s.not_after = tls::to_rfc3339(e.cert->not_after);
      s.chain_length = e.cert->chain_length;
      s.roots = e.cert->root_pems.size();
    }
    if (e.due != TimePoint{} && e.due != kNever) s.refresh_at = tls::to_rfc3339(e.due);
    s.failures = e.failures;
    s.last_error = e.last_error;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace meshnode::ca
