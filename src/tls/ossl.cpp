#include "tls/ossl.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <ctime>

namespace meshnode::tls {
namespace {

// Caps an OpenSSL length so a huge string_view never wraps the int-typed BIO APIs.
BioPtr memory_bio(std::string_view text) {
  if (text.size() > static_cast<size_t>(INT32_MAX)) return nullptr;
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string drain(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  if (len <= 0 || data == nullptr) return {};
  return std::string(data, static_cast<size_t>(len));
}

Result<std::chrono::system_clock::time_point> to_time_point(const ASN1_TIME* t, const char* which) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    return fail_ossl(Errc::kCertificate, std::string("cannot read certificate ") + which);
  }
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace

void free_x509_stack(STACK_OF(X509) * stack) noexcept { sk_X509_pop_free(stack, X509_free); }

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

std::unexpected<Error> fail_ossl(Errc code, std::string context) {
  std::string errors = openssl_errors();
  if (!errors.empty()) context += ": " + errors;
  return fail(code, std::move(context));
}

X509Ptr share(X509* cert) noexcept {
  X509_up_ref(cert);
  return X509Ptr(cert);
}

Result<std::vector<X509Ptr>> certificates_from_pem(std::string_view pem) {
  BioPtr bio = memory_bio(pem);
  if (!bio) return fail_ossl(Errc::kCertificate, "cannot buffer PEM text");
  std::vector<X509Ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  // The loop always ends with an error: "no start line" at a clean end of input is expected;
  // anything else means a block was malformed.
  unsigned long last = ERR_peek_last_error();
  if (ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
  } else if (last != 0) {
    return fail_ossl(Errc::kCertificate, "malformed PEM certificate");
  }
  if (certs.empty()) return fail(Errc::kCertificate, "no PEM certificate found");
  return certs;
}

Result<EvpPkeyPtr> private_key_from_pem(std::string_view pem) {
  BioPtr bio = memory_bio(pem);
  if (!bio) return fail_ossl(Errc::kCertificate, "cannot buffer PEM text");
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return fail_ossl(Errc::kCertificate, "no valid PEM private key found");
  return key;
}

std::string to_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return {};
  return drain(bio.get());
}

std::string to_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return {};
  }
  return drain(bio.get());
}

Result<EvpPkeyPtr> generate_p256_key() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return fail_ossl(Errc::kCertificate, "cannot generate ECDSA P-256 key");
  return key;
}

std::string serial_hex(const X509* cert) {
  BignumPtr bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr));
  if (!bn) return {};
  if (BN_is_zero(bn.get())) return "0";
  char* hex = BN_bn2hex(bn.get());
  if (hex == nullptr) return {};
  std::string out(hex);
  OPENSSL_free(hex);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // BN_bn2hex pads to whole bytes; the documented form has no leading zeros.
  size_t first = out.find_first_not_of('0');
  return first == std::string::npos ? "0" : out.substr(first);
}

Result<std::chrono::system_clock::time_point> not_before(const X509* cert) {
  return to_time_point(X509_get0_notBefore(cert), "notBefore");
}

Result<std::chrono::system_clock::time_point> not_after(const X509* cert) {
  return to_time_point(X509_get0_notAfter(cert), "notAfter");
}

std::vector<std::string> uri_sans(const X509* cert) {
  std::vector<std::string> out;
  GeneralNamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                     static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  return out;
}

}  // namespace meshnode::tls
