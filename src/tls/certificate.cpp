#include "tls/certificate.hpp"

namespace meshnode::tls {

CertificateProvider::~CertificateProvider() = default;

Result<void> fill_leaf_metadata(CertifiedKey& ck) {
  if (!ck.leaf) return fail(Errc::kCertificate, "certificate has no leaf");
  std::vector<std::string> sans = uri_sans(ck.leaf.get());
  if (sans.empty()) return fail(Errc::kCertificate, "leaf certificate has no URI SAN");
  auto id = base::SpiffeId::parse(sans.front());
  if (!id) return fail(Errc::kCertificate, "leaf certificate: " + id.error().context);
  auto nb = not_before(ck.leaf.get());
  if (!nb) return std::unexpected(nb.error());
  auto na = not_after(ck.leaf.get());
  if (!na) return std::unexpected(na.error());
  ck.identity = std::move(*id);
  ck.not_before = *nb;
  ck.not_after = *na;
  ck.leaf_pem = to_pem(ck.leaf.get());
  ck.serial_hex = serial_hex(ck.leaf.get());
  return {};
}

}  // namespace meshnode::tls
