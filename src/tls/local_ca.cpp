#include "tls/local_ca.hpp"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/unique_fd.hpp"

namespace meshnode::tls {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::system_clock;
using namespace std::chrono_literals;

constexpr auto kRootValidity = std::chrono::days(3650);
// Backdating tolerates small clock skew between nodes (Istio backdates too).
constexpr auto kBackdate = 1min;
constexpr const char* kLockFile = ".root-ca.lock";
constexpr const char* kTrustDomainOrg = "cluster.local";

struct RootMaterial {
  X509Ptr cert;
  EvpPkeyPtr key;
};

// ---- certificate building --------------------------------------------------------------------

Result<void> set_random_serial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return fail_ossl(Errc::kCertificate, "RAND_bytes");
  bytes[0] &= 0x7f;  // DER INTEGER must stay positive
  bytes[0] |= 0x01;  // and non-zero, with no leading-zero byte to strip
  BignumPtr bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr) {
    return fail_ossl(Errc::kCertificate, "cannot set serial number");
  }
  return {};
}

Result<void> set_validity(X509* cert, Clock::time_point from, Clock::time_point to) {
  if (ASN1_TIME_set(X509_getm_notBefore(cert), Clock::to_time_t(from)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert), Clock::to_time_t(to)) == nullptr) {
    return fail_ossl(Errc::kCertificate, "cannot set validity");
  }
  return {};
}

// `value` uses the openssl.cnf extension syntax, e.g. "critical,CA:TRUE".
Result<void> add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509ExtensionPtr ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return fail_ossl(Errc::kCertificate, std::string("cannot add extension ") + OBJ_nid2sn(nid));
  }
  return {};
}

// Built by hand rather than via the config syntax so no character of the URI can be read as syntax.
Result<void> add_uri_sans(X509* cert, const std::vector<std::string>& uris) {
  GeneralNamesPtr names(GENERAL_NAMES_new());
  if (!names) return fail_ossl(Errc::kCertificate, "cannot build URI SAN");
  for (const auto& uri : uris) {
    GENERAL_NAME* name = GENERAL_NAME_new();
    ASN1_IA5STRING* ia5 = ASN1_IA5STRING_new();
    if (name == nullptr || ia5 == nullptr || ASN1_STRING_set(ia5, uri.data(), static_cast<int>(uri.size())) != 1) {
      GENERAL_NAME_free(name);
      ASN1_IA5STRING_free(ia5);
      return fail_ossl(Errc::kCertificate, "cannot build URI SAN");
    }
    GENERAL_NAME_set0_value(name, GEN_URI, ia5);
    if (sk_GENERAL_NAME_push(names.get(), name) == 0) {
      GENERAL_NAME_free(name);
      return fail_ossl(Errc::kCertificate, "cannot build URI SAN");
    }
  }
  // Critical: the subject is empty, so the SAN is the only name (RFC 5280 §4.2.1.6; Istio does this).
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 1, X509V3_ADD_DEFAULT) != 1) {
    return fail_ossl(Errc::kCertificate, "cannot add URI SAN");
  }
  return {};
}

Result<void> apply_all(std::initializer_list<Result<void>> steps) {
  for (const auto& step : steps) {
    if (!step) return step;
  }
  return {};
}

Result<X509Ptr> make_root(EVP_PKEY* key) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return fail_ossl(Errc::kCertificate, "X509_new");
  }
  if (auto r = set_random_serial(cert.get()); !r) return std::unexpected(r.error());
  auto now = Clock::now();
  if (auto r = set_validity(cert.get(), now - kBackdate, now + kRootValidity); !r) {
    return std::unexpected(r.error());
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  auto text = [](const char* s) { return reinterpret_cast<const unsigned char*>(s); };
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, text(kTrustDomainOrg), -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, text("meshnode local CA"), -1, -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), name) != 1 || X509_set_pubkey(cert.get(), key) != 1) {
    return fail_ossl(Errc::kCertificate, "cannot set root names");
  }
  auto ext = apply_all({
      add_extension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"),
      add_extension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"),
      add_extension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"),
  });
  if (!ext) return std::unexpected(ext.error());
  if (X509_sign(cert.get(), key, EVP_sha256()) <= 0) return fail_ossl(Errc::kCertificate, "sign root");
  return cert;
}

Result<X509Ptr> make_leaf(const std::vector<std::string>& uris, EVP_PKEY* leaf_key, X509* root, EVP_PKEY* root_key,
                          Clock::time_point from, Clock::time_point to) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return fail_ossl(Errc::kCertificate, "X509_new");
  }
  auto basics = apply_all({set_random_serial(cert.get()), set_validity(cert.get(), from, to)});
  if (!basics) return std::unexpected(basics.error());
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(root)) != 1 ||
      X509_set_pubkey(cert.get(), leaf_key) != 1) {
    return fail_ossl(Errc::kCertificate, "cannot set leaf issuer or key");
  }
  auto ext = apply_all({
      add_extension(cert.get(), root, NID_basic_constraints, "critical,CA:FALSE"),
      add_extension(cert.get(), root, NID_key_usage, "critical,digitalSignature,keyEncipherment"),
      add_extension(cert.get(), root, NID_ext_key_usage, "serverAuth,clientAuth"),
      add_extension(cert.get(), root, NID_authority_key_identifier, "keyid:always"),
      add_uri_sans(cert.get(), uris),
  });
  if (!ext) return std::unexpected(ext.error());
  if (X509_sign(cert.get(), root_key, EVP_sha256()) <= 0) {
    return fail_ossl(Errc::kCertificate, "sign leaf");
  }
  return cert;
}

// ---- files -----------------------------------------------------------------------------------

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::kCertificate, "cannot read " + path.string() + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail(Errc::kCertificate, "cannot read " + path.string());
  return std::move(text).str();
}

Result<void> write_all(int fd, const std::string& text, const fs::path& path) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::fail_errno("write " + path.string(), errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return base::fail_errno("fsync " + path.string(), errno);
  return {};
}

// Temp file + rename: a reader never sees a half-written file under the final name.
Result<void> write_atomically(const fs::path& path, const std::string& text, mode_t mode) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // a leftover from a crashed run of a process with the same pid
  base::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd) return base::fail_errno("create " + tmp.string(), errno);
  if (auto r = write_all(fd.get(), text, tmp); !r) {
    ::unlink(tmp.c_str());
    return r;
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return base::fail_errno("rename to " + path.string(), err);
  }
  return {};
}

Result<bool> present(const fs::path& path) {
  std::error_code ec;
  bool exists = fs::exists(path, ec);
  if (ec) return fail(Errc::kCertificate, "cannot stat " + path.string(), ec);
  return exists;
}

Result<RootMaterial> load_root(const fs::path& cert_path, const fs::path& key_path) {
  auto cert_pem = read_file(cert_path);
  if (!cert_pem) return std::unexpected(cert_pem.error());
  auto key_pem = read_file(key_path);
  if (!key_pem) return std::unexpected(key_pem.error());
  auto certs = certificates_from_pem(*cert_pem);
  if (!certs) return fail(Errc::kCertificate, cert_path.string() + ": " + certs.error().context);
  auto key = private_key_from_pem(*key_pem);
  if (!key) return fail(Errc::kCertificate, key_path.string() + ": " + key.error().context);
  X509Ptr root = std::move(certs->front());
  if (X509_check_ca(root.get()) == 0) {
    return fail(Errc::kCertificate, cert_path.string() + ": first certificate is not a CA");
  }
  if (EVP_PKEY_eq(X509_get0_pubkey(root.get()), key->get()) != 1) {
    ERR_clear_error();
    return fail(Errc::kCertificate,
                key_path.string() + " does not match the certificate in " + cert_path.string());
  }
  return RootMaterial{std::move(root), std::move(*key)};
}

Result<RootMaterial> create_root(const fs::path& cert_path, const fs::path& key_path) {
  auto key = generate_p256_key();
  if (!key) return std::unexpected(key.error());
  auto cert = make_root(key->get());
  if (!cert) return std::unexpected(cert.error());
  std::string key_pem = to_pem(key->get());
  std::string cert_pem = to_pem(cert->get());
  if (key_pem.empty() || cert_pem.empty()) return fail_ossl(Errc::kCertificate, "cannot encode root");
  // Key first: once the certificate is visible, its key is too (load_or_create's lock-free path).
  if (auto r = write_atomically(key_path, key_pem, 0600); !r) return std::unexpected(r.error());
  if (auto r = write_atomically(cert_path, cert_pem, 0644); !r) return std::unexpected(r.error());
  return RootMaterial{std::move(*cert), std::move(*key)};
}

Result<base::UniqueFd> lock_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(Errc::kIo, "cannot create CA directory " + dir.string(), ec);
  fs::path lock_path = dir / kLockFile;
  // flock, not an O_EXCL marker file: the kernel releases it if the holder dies mid-creation.
  base::UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return base::fail_errno("open " + lock_path.string(), errno);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return base::fail_errno("flock " + lock_path.string(), errno);
  }
  return fd;
}

// The state of the pair; "exactly one present" is an operator error we name precisely.
Result<std::pair<bool, bool>> presence(const fs::path& cert_path, const fs::path& key_path) {
  auto has_cert = present(cert_path);
  if (!has_cert) return std::unexpected(has_cert.error());
  auto has_key = present(key_path);
  if (!has_key) return std::unexpected(has_key.error());
  if (*has_cert && !*has_key) {
    return fail(Errc::kCertificate, cert_path.string() + " exists but " + key_path.string() + " is missing");
  }
  if (*has_key && !*has_cert) {
    return fail(Errc::kCertificate, key_path.string() + " exists but " + cert_path.string() + " is missing");
  }
  return std::pair{*has_cert, *has_key};
}

// Decides under the lock, so "exactly one file present" can never be a racing creator's midpoint.
Result<RootMaterial> load_or_create_locked(const fs::path& dir, const fs::path& cert_path,
                                           const fs::path& key_path) {
  auto lock = lock_dir(dir);
  if (!lock) {
    // A read-only directory cannot hold the lock; a half-present pair is still the real problem.
    auto state = presence(cert_path, key_path);
    return std::unexpected(state ? lock.error() : state.error());
  }
  auto state = presence(cert_path, key_path);
  if (!state) return std::unexpected(state.error());
  if (state->first) return load_root(cert_path, key_path);
  return create_root(cert_path, key_path);
}

}  // namespace

LocalCa::LocalCa(Private, X509Ptr root, EvpPkeyPtr root_key, std::chrono::seconds leaf_validity)
    : root_(std::move(root)), root_key_(std::move(root_key)), leaf_validity_(leaf_validity) {}

Result<std::unique_ptr<LocalCa>> LocalCa::load_or_create(const fs::path& dir,
                                                         std::chrono::seconds leaf_validity) {
  if (leaf_validity <= std::chrono::seconds::zero()) {
    return fail(Errc::kInvalidArgument, "leaf validity must be positive");
  }
  const fs::path cert_path = dir / kRootCertFile;
  const fs::path key_path = dir / kRootKeyFile;
  // Lock-free fast path: both files present means creation finished (the key is renamed first),
  // and it also works on a read-only directory such as a mounted Secret.
  auto has_cert = present(cert_path);
  auto has_key = present(key_path);
  Result<RootMaterial> root = (has_cert && has_key && *has_cert && *has_key)
                                  ? load_root(cert_path, key_path)
                                  : load_or_create_locked(dir, cert_path, key_path);
  if (!root) return std::unexpected(root.error());
  return std::make_unique<LocalCa>(Private{}, std::move(root->cert), std::move(root->key), leaf_validity);
}

Result<CertifiedKey> LocalCa::issue(const base::SpiffeId& id) {
  auto key = generate_p256_key();
  if (!key) return std::unexpected(key.error());
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  auto leaf = make_leaf({id.to_string()}, key->get(), root_.get(), root_key_.get(), now - kBackdate,
                        now + leaf_validity_);
  if (!leaf) return std::unexpected(leaf.error());
  CertifiedKey ck;
  ck.leaf = std::move(*leaf);
  ck.key = std::move(*key);
  ck.roots.push_back(share(root_.get()));
  if (auto r = fill_leaf_metadata(ck); !r) return std::unexpected(r.error());
  return ck;
}

Result<CertifiedKey> LocalCa::issue_for_test(const std::vector<std::string>& uri_sans, const base::SpiffeId& identity,
                                             std::chrono::system_clock::time_point not_before,
                                             std::chrono::system_clock::time_point not_after) {
  auto key = generate_p256_key();
  if (!key) return std::unexpected(key.error());
  std::lock_guard lock(mu_);
  auto leaf = make_leaf(uri_sans, key->get(), root_.get(), root_key_.get(), not_before, not_after);
  if (!leaf) return std::unexpected(leaf.error());
  CertifiedKey ck;
  ck.identity = identity;
  ck.leaf = std::move(*leaf);
  ck.key = std::move(*key);
  ck.roots.push_back(share(root_.get()));
  ck.not_before = not_before;
  ck.not_after = not_after;
  return ck;
}

}  // namespace meshnode::tls
