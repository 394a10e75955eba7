// Linked into every test executable (cmake/meshnode.cmake, meshnode_test).
//
// OpenSSL frees its state in an atexit handler, including the pthread key that holds each
// thread's error queue and random generator. gRPC's executor and event-engine threads can
// still be running at exit (its shutdown after the last channel is asynchronous), so their
// per-thread OpenSSL state becomes unreachable and LeakSanitizer reports 1-11 KB "leaks" in
// CRYPTO_zalloc from ERR_clear_error / RAND_bytes_ex on gRPC threads. Nothing leaks while the
// process runs; skipping the exit-time cleanup keeps that state reachable, so real leaks
// still fail a test. Must run before any other OpenSSL call: a static initializer of the
// executable runs before main and before gRPC's lazy OpenSSL initialisation.

#include <openssl/crypto.h>

#include <cstdio>
#include <cstdlib>

namespace {

const bool kOpenSslInitialised = [] {
  if (OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) != 1) {
    std::fputs("test support: OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT) failed\n", stderr);
    std::abort();
  }
  return true;
}();

}  // namespace
