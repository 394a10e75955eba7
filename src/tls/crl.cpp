#include "tls/crl.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace meshnode::tls {
namespace {

std::atomic<std::shared_ptr<const CrlStore>>& installed() {
  static std::atomic<std::shared_ptr<const CrlStore>> store;
  return store;
}

}  // namespace

Result<std::shared_ptr<const CrlSet>> CrlSet::parse(std::string_view pem) {
  auto set = std::make_shared<CrlSet>();
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return fail_ossl(Errc::kCertificate, "BIO_new_mem_buf");
  ERR_clear_error();
  for (;;) {
    X509CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr));
    if (!crl) break;
    set->crls_.push_back(std::move(crl));
  }
  // The loop ends at EOF (PEM_R_NO_START_LINE) or at a malformed block.
  unsigned long err = ERR_peek_last_error();
  if (err != 0 && ERR_GET_REASON(err) != PEM_R_NO_START_LINE) {
    return fail_ossl(Errc::kCertificate,
                     "malformed CRL after " + std::to_string(set->crls_.size()) + " good ones");
  }
  (void)openssl_errors();
  return std::shared_ptr<const CrlSet>(std::move(set));
}

std::string CrlSet::revoked(X509* cert, X509* issuer) const {
  for (const auto& crl : crls_) {
    if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_subject_name(issuer)) != 0) continue;
    EVP_PKEY* key = X509_get0_pubkey(issuer);
    if (key == nullptr || X509_CRL_verify(crl.get(), key) != 1) {
      (void)openssl_errors();
      continue;  // not signed by this issuer: it says nothing about this certificate
    }
    X509_REVOKED* entry = nullptr;
    if (X509_CRL_get0_by_cert(crl.get(), &entry, cert) == 1) {
      return "certificate serial " + serial_hex(cert) + " is revoked by the CRL";
    }
  }
  return {};
}

Result<bool> CrlStore::reload_if_changed() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0)
    return base::fail_errno("cannot stat CRL file " + path_.string(), errno);
  std::string stamp = std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
                      std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  if (stamp == stamp_) return false;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return base::fail_errno("cannot open CRL file " + path_.string(), errno);
  std::ostringstream text;
  text << in.rdbuf();
  auto set = CrlSet::parse(text.str());
  if (!set) return fail(Errc::kCertificate, path_.string() + ": " + set.error().context);
  current_.store(std::move(*set));
  stamp_ = std::move(stamp);
  return true;
}

void set_crl_store(std::shared_ptr<const CrlStore> store) { installed().store(std::move(store)); }

std::string chain_revocation_reason(X509_STORE_CTX* store_ctx) {
  auto store = installed().load();
  if (!store) return {};
  auto crls = store->current();
  if (crls->size() == 0) return {};
  STACK_OF(X509)* chain = X509_STORE_CTX_get0_chain(store_ctx);
  // Each certificate below the root, checked against CRLs of its own issuer.
  for (int i = 0; chain != nullptr && i + 1 < sk_X509_num(chain); ++i) {
    std::string why = crls->revoked(sk_X509_value(chain, i), sk_X509_value(chain, i + 1));
    if (!why.empty()) return why;
  }
  return {};
}

}  // namespace meshnode::tls
