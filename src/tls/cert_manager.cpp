#include "tls/cert_manager.hpp"

#include <spdlog/spdlog.h>

#include <ctime>

#include "base/check.hpp"
#include "tls/context.hpp"

namespace meshnode::tls {
namespace {

using TimePoint = std::chrono::system_clock::time_point;

TimePoint refresh_at(const IdentityTls& tls) { return tls.not_before + (tls.not_after - tls.not_before) / 2; }

}  // namespace

std::string to_rfc3339(TimePoint t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

CertManager::CertManager(std::unique_ptr<CertificateProvider> provider, Clock clock)
    : provider_(std::move(provider)),
      clock_(clock ? std::move(clock) : Clock(&std::chrono::system_clock::now)) {
  MESHNODE_CHECK(provider_ != nullptr, "CertManager needs a certificate provider");
}

Result<std::shared_ptr<const IdentityTls>> CertManager::build(const base::SpiffeId& id) {
  auto ck = provider_->issue(id);
  if (!ck) return std::unexpected(ck.error());
  // Shared mode asks for other workloads' identities: never serve a certificate for the wrong one.
  if (ck->identity != id) {
    return base::fail(Errc::kCertificate,
                      "provider issued " + ck->identity.to_string() + " when asked for " + id.to_string());
  }
  auto server = make_server_context(*ck);
  if (!server) return std::unexpected(server.error());
  auto client = make_client_context(*ck);
  if (!client) return std::unexpected(client.error());
  auto tls = std::make_shared<IdentityTls>();
  tls->identity = ck->identity;
  tls->server_ctx = std::move(*server);
  tls->client_ctx = std::move(*client);
  tls->not_before = ck->not_before;
  tls->not_after = ck->not_after;
  tls->leaf_pem = std::move(ck->leaf_pem);
  tls->serial_hex = std::move(ck->serial_hex);
  for (const auto& root : ck->roots) tls->root_pems.push_back(to_pem(root.get()));
  return std::shared_ptr<const IdentityTls>(std::move(tls));
}

Result<std::shared_ptr<const IdentityTls>> CertManager::get(const base::SpiffeId& id) {
  std::lock_guard lock(mu_);
  const TimePoint now = clock_();
  auto it = cache_.find(id);
  if (it != cache_.end() && now < refresh_at(*it->second)) return it->second;
  auto fresh = build(id);
  if (fresh) {
    cache_.insert_or_assign(id, *fresh);
    return fresh;
  }
  if (it != cache_.end() && now < it->second->not_after) {
    spdlog::warn(
        "certificate refresh failed, serving the current certificate identity={} expires={} error=\"{}\"",
        id.to_string(), to_rfc3339(it->second->not_after), fresh.error().message());
    return it->second;
  }
  // An expired certificate is useless to peers; forget it so dump() does not list it as available.
  if (it != cache_.end()) cache_.erase(it);
  return fresh;
}

std::vector<CertInfo> CertManager::dump() const {
  std::lock_guard lock(mu_);
  std::vector<CertInfo> out;
  out.reserve(cache_.size());
  for (const auto& [id, tls] : cache_) {
    out.push_back(CertInfo{id.to_string(), "Available", tls->serial_hex, to_rfc3339(tls->not_before),
                           to_rfc3339(tls->not_after), tls->leaf_pem, tls->root_pems});
  }
  return out;
}

}  // namespace meshnode::tls
