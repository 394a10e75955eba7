#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {

using X509CrlPtr = std::unique_ptr<X509_CRL, Deleter<&X509_CRL_free>>;

/// Parsed certificate revocation lists (RFC 5280 §5). Immutable; share across threads.
class CrlSet {
 public:
  /// Every PEM "X509 CRL" block of `pem`. An empty text gives an empty set.
  /// Errc::kCertificate when a block is malformed.
  [[nodiscard]] static Result<std::shared_ptr<const CrlSet>> parse(std::string_view pem);

  /// Why `cert` must be refused: "" when no CRL issued by `issuer` lists it. Only CRLs whose issuer
  /// name matches and whose signature verifies with `issuer`'s key count; a certificate with no CRL
  /// for its issuer is accepted (unknown status is allowed, as the reference does).
  [[nodiscard]] std::string revoked(X509* cert, X509* issuer) const;

  [[nodiscard]] std::size_t size() const noexcept { return crls_.size(); }

 private:
  std::vector<X509CrlPtr> crls_;
};

/// The CRL file of CRL_PATH (research §3.1: next to the roots), hot-reloaded: reload_if_changed()
/// re-reads it when its inode, size or mtime changed; a file that fails to parse keeps the previous
/// set (logged by the caller from the returned error). current() is lock-free for handshakes.
class CrlStore {
 public:
  explicit CrlStore(std::filesystem::path path) : path_(std::move(path)) {}

  /// @returns true when a new set was loaded, false when unchanged; Errc::kIo when the file cannot
  ///          be read, Errc::kCertificate when it does not parse. Blocking file I/O: control thread.
  [[nodiscard]] Result<bool> reload_if_changed();

  /// The set in force (empty before the first successful load). Any thread.
  [[nodiscard]] std::shared_ptr<const CrlSet> current() const { return current_.load(); }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::string stamp_;  // inode:size:mtime of the loaded file
  std::atomic<std::shared_ptr<const CrlSet>> current_{std::make_shared<const CrlSet>()};
};

/// Installs the process-wide CRL store consulted by every HBONE handshake on contexts from
/// make_server_context / make_client_context (CRL_PATH is one file per process). nullptr removes
/// it. Any thread; handshakes in progress keep the set they loaded.
void set_crl_store(std::shared_ptr<const CrlStore> store);

/// Internal to src/tls: why the verified chain of `store_ctx` must be refused by the installed
/// CRLs, "" when it must not (also when no store is installed).
[[nodiscard]] std::string chain_revocation_reason(X509_STORE_CTX* store_ctx);

}  // namespace meshnode::tls
