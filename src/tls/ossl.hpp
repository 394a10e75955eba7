#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/deleter.hpp"
#include "base/error.hpp"

namespace meshnode::tls {

using base::Errc;
using base::Error;
using base::fail;
using base::Result;

using base::Deleter;

/// `sk_X509_pop_free(s, X509_free)` as a plain function: the sk_ helpers are macros/inlines and
/// cannot be template arguments.
void free_x509_stack(STACK_OF(X509) * stack) noexcept;

/// Owning handles for OpenSSL objects: move-only, release their reference in the destructor
/// (`*_free` drops one reference for refcounted types such as X509, EVP_PKEY, SSL_CTX). Objects
/// are not internally synchronised unless OpenSSL documents it (SSL_CTX, X509 and EVP_PKEY may be
/// shared read-only across threads once configured; an SSL belongs to one thread at a time).
using X509Ptr = std::unique_ptr<X509, Deleter<&X509_free>>;
using X509StackPtr = std::unique_ptr<STACK_OF(X509), Deleter<&free_x509_stack>>;
using X509StorePtr = std::unique_ptr<X509_STORE, Deleter<&X509_STORE_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<&X509_STORE_CTX_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, Deleter<&X509_NAME_free>>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, Deleter<&X509_EXTENSION_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<&GENERAL_NAMES_free>>;
using Asn1IntegerPtr = std::unique_ptr<ASN1_INTEGER, Deleter<&ASN1_INTEGER_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<&BN_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<&EVP_PKEY_free>>;
using EvpPkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Deleter<&EVP_PKEY_CTX_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<&BIO_free_all>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, Deleter<&SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, Deleter<&SSL_free>>;

/// Drains this thread's OpenSSL error queue into one line: "lib:reason; lib:reason" (oldest first).
/// Empty when the queue was empty. Always leaves the queue empty, so a stale error never leaks into
/// a later, unrelated failure message. Thread-safe (the queue is per thread).
std::string openssl_errors();

/// `Error{code, context + ": " + openssl_errors()}`; use right after a failed OpenSSL call.
[[nodiscard]] std::unexpected<Error> fail_ossl(Errc code, std::string context);

/// A new owning reference to `cert` (X509_up_ref; the certificate is shared, not copied).
/// `cert` must not be null. Thread-safe (atomic reference count).
[[nodiscard]] X509Ptr share(X509* cert) noexcept;

/// Parses every PEM "CERTIFICATE" block of `pem`, in order. Errc::kCertificate when the text holds
/// no certificate or a block is malformed. Pure.
[[nodiscard]] Result<std::vector<X509Ptr>> certificates_from_pem(std::string_view pem);

/// Parses the first PEM private key of `pem` (PKCS#8 or traditional, unencrypted).
/// Errc::kCertificate when there is none or it is malformed. Pure.
[[nodiscard]] Result<EvpPkeyPtr> private_key_from_pem(std::string_view pem);

/// PEM text ("-----BEGIN CERTIFICATE-----\n...") of `cert`. Empty only on allocation failure.
[[nodiscard]] std::string to_pem(X509* cert);

/// Unencrypted PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----") of `key`. Empty on allocation failure.
[[nodiscard]] std::string to_pem(EVP_PKEY* key);

/// A fresh ECDSA key on NIST P-256 (the key type Istio uses for workload certificates).
/// Errc::kCertificate if the OpenSSL provider refuses. Thread-safe.
[[nodiscard]] Result<EvpPkeyPtr> generate_p256_key();

/// Lowercase hex of the certificate serial number without leading zeros ("0" for zero).
[[nodiscard]] std::string serial_hex(const X509* cert);

/// The certificate's notBefore / notAfter as a time point (second precision, UTC).
/// Errc::kCertificate when the field cannot be converted.
[[nodiscard]] Result<std::chrono::system_clock::time_point> not_before(const X509* cert);
[[nodiscard]] Result<std::chrono::system_clock::time_point> not_after(const X509* cert);

/// Every URI entry of the subjectAltName extension, in certificate order; empty when there is no
/// SAN extension or no URI in it. DNS names and IPs are ignored (HBONE identity is URI SAN only).
[[nodiscard]] std::vector<std::string> uri_sans(const X509* cert);

}  // namespace meshnode::tls
