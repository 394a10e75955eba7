#include "tls/csr.hpp"

#include <openssl/pem.h>

namespace meshnode::tls {

Result<std::string> make_csr_pem(const base::SpiffeId& id, EVP_PKEY* key) {
  std::unique_ptr<X509_REQ, Deleter<&X509_REQ_free>> req(X509_REQ_new());
  if (!req || X509_REQ_set_version(req.get(), 0) != 1 || X509_REQ_set_pubkey(req.get(), key) != 1) {
    return fail_ossl(Errc::kCertificate, "CSR for " + id.to_string());
  }
  std::string san = "critical,URI:" + id.to_string();
  X509ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, san.c_str()));
  std::unique_ptr<STACK_OF(X509_EXTENSION), void (*)(STACK_OF(X509_EXTENSION)*)> exts(
      sk_X509_EXTENSION_new_null(), [](STACK_OF(X509_EXTENSION) * s) { sk_X509_EXTENSION_free(s); });
  if (!ext || !exts || sk_X509_EXTENSION_push(exts.get(), ext.get()) == 0 ||
      X509_REQ_add_extensions(req.get(), exts.get()) != 1) {
    return fail_ossl(Errc::kCertificate, "CSR SAN for " + id.to_string());
  }
  if (X509_REQ_sign(req.get(), key, EVP_sha256()) <= 0) return fail_ossl(Errc::kCertificate, "CSR signature");
  BioPtr out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509_REQ(out.get(), req.get()) != 1)
    return fail_ossl(Errc::kCertificate, "CSR PEM");
  char* data = nullptr;
  long len = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<std::size_t>(len));
}

}  // namespace meshnode::tls
