#include "fakes/test_ca.hpp"

#include <openssl/pem.h>
#include <openssl/rand.h>

#include <mutex>

#include "tls/csr.hpp"

namespace meshnode::fakes {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using namespace tls;

struct Authority {
  X509Ptr cert;
  EvpPkeyPtr key;
};

Result<void> add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return fail_ossl(Errc::kCertificate, "extension");
  return {};
}

Result<X509Ptr> new_cert(EVP_PKEY* subject_key, const char* cn, std::chrono::seconds lifetime) {
  X509Ptr cert(X509_new());
  if (!cert) return fail_ossl(Errc::kCertificate, "X509_new");
  X509_set_version(cert.get(), 2);
  BignumPtr bn(BN_new());
  BN_rand(bn.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
  BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get()));
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(lifetime.count()));
  X509_set_pubkey(cert.get(), subject_key);
  if (cn != nullptr) {
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  }
  return cert;
}

Result<void> sign(X509* cert, const Authority& issuer) {
  X509_set_issuer_name(cert, X509_get_subject_name(issuer.cert ? issuer.cert.get() : cert));
  if (X509_sign(cert, issuer.key.get(), EVP_sha256()) <= 0) return fail_ossl(Errc::kCertificate, "X509_sign");
  return {};
}

Result<Authority> make_root(const char* cn) {
  auto key = generate_p256_key();
  if (!key) return std::unexpected(key.error());
  auto cert = new_cert(key->get(), cn, std::chrono::hours(24 * 365));
  if (!cert) return std::unexpected(cert.error());
  X509_set_issuer_name(cert->get(), X509_get_subject_name(cert->get()));
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (auto ok = add_ext(cert->get(), cert->get(), nid, value); !ok) return std::unexpected(ok.error());
  }
  if (X509_sign(cert->get(), key->get(), EVP_sha256()) <= 0)
    return fail_ossl(Errc::kCertificate, "sign root");
  return Authority{std::move(*cert), std::move(*key)};
}

}  // namespace

struct TestCa::Impl {
  Authority root;
  Authority intermediate;  // cert null when leaves are signed by the root
  Authority extra_root;    // cert null when absent
  mutable std::mutex mu;

  const Authority& issuer() const { return intermediate.cert ? intermediate : root; }

  Result<X509Ptr> leaf(EVP_PKEY* key, const std::string& san, std::chrono::seconds lifetime,
                       const char* eku) const {
    auto cert = new_cert(key, nullptr, lifetime);
    if (!cert) return cert;
    for (auto [nid, value] :
         {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
          std::pair{NID_key_usage, "critical,digitalSignature,keyEncipherment"},
          std::pair{NID_ext_key_usage, eku}, std::pair{NID_subject_alt_name, san.c_str()}}) {
      if (auto ok = add_ext(cert->get(), issuer().cert.get(), nid, value); !ok)
        return std::unexpected(ok.error());
    }
    if (auto ok = sign(cert->get(), issuer()); !ok) return std::unexpected(ok.error());
    return cert;
  }
};

TestCa::TestCa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TestCa::~TestCa() = default;

Result<std::shared_ptr<TestCa>> TestCa::create(Options options) {
  auto impl = std::make_unique<Impl>();
  auto root = make_root("meshnode test root");
  if (!root) return std::unexpected(root.error());
  impl->root = std::move(*root);
  if (options.intermediate) {
    auto key = generate_p256_key();
    if (!key) return std::unexpected(key.error());
    auto cert = new_cert(key->get(), "meshnode test intermediate", std::chrono::hours(24 * 30));
    if (!cert) return std::unexpected(cert.error());
    for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                              std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"}}) {
      if (auto ok = add_ext(cert->get(), impl->root.cert.get(), nid, value); !ok)
        return std::unexpected(ok.error());
    }
    if (auto ok = sign(cert->get(), impl->root); !ok) return std::unexpected(ok.error());
    impl->intermediate = Authority{std::move(*cert), std::move(*key)};
  }
  if (options.second_root) {
    auto extra = make_root("meshnode test second root");
    if (!extra) return std::unexpected(extra.error());
    impl->extra_root = std::move(*extra);
  }
  return std::make_shared<TestCa>(std::move(impl));
}

std::string TestCa::root_pem() const { return to_pem(impl_->root.cert.get()); }

std::string TestCa::root_bundle_pem() const {
  std::string out = root_pem();
  if (impl_->extra_root.cert) out += to_pem(impl_->extra_root.cert.get());
  return out;
}

Result<std::pair<std::string, std::string>> TestCa::server_certificate(std::string_view dns_name) const {
  std::lock_guard lock(impl_->mu);
  auto key = generate_p256_key();
  if (!key) return std::unexpected(key.error());
  // Signed by the root directly so that the gRPC client needs only the root.
  auto cert = new_cert(key->get(), nullptr, std::chrono::hours(24));
  if (!cert) return std::unexpected(cert.error());
  std::string san = "DNS:" + std::string(dns_name);
  for (auto [nid, value] :
       {std::pair{NID_basic_constraints, "critical,CA:FALSE"}, std::pair{NID_ext_key_usage, "serverAuth"},
        std::pair{NID_subject_alt_name, san.c_str()}}) {
    if (auto ok = add_ext(cert->get(), impl_->root.cert.get(), nid, value); !ok)
      return std::unexpected(ok.error());
  }
  if (auto ok = sign(cert->get(), impl_->root); !ok) return std::unexpected(ok.error());
  return std::pair{to_pem(cert->get()), to_pem(key->get())};
}

Result<IssuedCertificate> TestCa::sign_csr(std::string_view csr_pem, std::chrono::seconds lifetime) const {
  std::lock_guard lock(impl_->mu);
  BioPtr bio(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  std::unique_ptr<X509_REQ, base::Deleter<&X509_REQ_free>> req(
      PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) return fail_ossl(Errc::kCertificate, "CSR is not PEM PKCS#10");
  EvpPkeyPtr key(X509_REQ_get_pubkey(req.get()));
  if (!key || X509_REQ_verify(req.get(), key.get()) != 1)
    return fail_ossl(Errc::kCertificate, "CSR signature invalid");
  std::unique_ptr<STACK_OF(X509_EXTENSION), void (*)(STACK_OF(X509_EXTENSION)*)> exts(
      X509_REQ_get_extensions(req.get()),
      [](STACK_OF(X509_EXTENSION) * s) { sk_X509_EXTENSION_pop_free(s, X509_EXTENSION_free); });
  GeneralNamesPtr names(
      exts ? static_cast<GENERAL_NAMES*>(X509V3_get_d2i(exts.get(), NID_subject_alt_name, nullptr, nullptr))
           : nullptr);
  std::vector<std::string> uris;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type != GEN_URI) return fail(Errc::kCertificate, "CSR carries a non-URI SAN");
    const auto* s = n->d.uniformResourceIdentifier;
    uris.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
  }
  if (uris.size() != 1)
    return fail(Errc::kCertificate, "CSR must carry exactly one URI SAN, has " + std::to_string(uris.size()));
  auto cert = impl_->leaf(key.get(), "critical,URI:" + uris[0], lifetime, "serverAuth,clientAuth");
  if (!cert) return std::unexpected(cert.error());
  IssuedCertificate out;
  out.identity = uris[0];
  out.serial_hex = serial_hex(cert->get());
  out.cert_chain.push_back(to_pem(cert->get()));
  if (impl_->intermediate.cert) out.cert_chain.push_back(to_pem(impl_->intermediate.cert.get()));
  out.cert_chain.push_back(root_bundle_pem());
  return out;
}

Result<std::pair<IssuedCertificate, EvpPkeyPtr>> TestCa::issue(const base::SpiffeId& id,
                                                               std::chrono::seconds lifetime) const {
  auto key = generate_p256_key();
  if (!key) return std::unexpected(key.error());
  auto csr = make_csr_pem(id, key->get());
  if (!csr) return std::unexpected(csr.error());
  auto issued = sign_csr(*csr, lifetime);
  if (!issued) return std::unexpected(issued.error());
  return std::pair{std::move(*issued), std::move(*key)};
}

Result<std::string> TestCa::crl_pem(const std::vector<std::string>& serials_hex) const {
  std::lock_guard lock(impl_->mu);
  const Authority& issuer = impl_->issuer();
  std::unique_ptr<X509_CRL, base::Deleter<&X509_CRL_free>> crl(X509_CRL_new());
  X509_CRL_set_version(crl.get(), 1);
  X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(issuer.cert.get()));
  std::unique_ptr<ASN1_TIME, base::Deleter<&ASN1_TIME_free>> now(ASN1_TIME_new()), next(ASN1_TIME_new());
  X509_gmtime_adj(now.get(), 0);
  X509_gmtime_adj(next.get(), 86400);
  X509_CRL_set1_lastUpdate(crl.get(), now.get());
  X509_CRL_set1_nextUpdate(crl.get(), next.get());
  for (const auto& hex : serials_hex) {
    BIGNUM* raw = nullptr;
    if (BN_hex2bn(&raw, hex.c_str()) == 0) return fail(Errc::kInvalidArgument, "bad serial " + hex);
    BignumPtr bn(raw);
    X509_REVOKED* revoked = X509_REVOKED_new();
    Asn1IntegerPtr serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
    X509_REVOKED_set_serialNumber(revoked, serial.get());
    X509_REVOKED_set_revocationDate(revoked, now.get());
    X509_CRL_add0_revoked(crl.get(), revoked);
  }
  X509_CRL_sort(crl.get());
  if (X509_CRL_sign(crl.get(), issuer.key.get(), EVP_sha256()) <= 0)
    return fail_ossl(Errc::kCertificate, "CRL sign");
  BioPtr out(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_CRL(out.get(), crl.get());
  char* data = nullptr;
  long len = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<std::size_t>(len));
}

}  // namespace meshnode::fakes
