// Asio's SSL code, compiled once for the tests that drive a raw TLS peer with asio::ssl (the
// product wraps OpenSSL itself, tls/tls_stream.hpp). Asio is built with ASIO_SEPARATE_COMPILATION
// (cmake/deps.cmake), so its non-template SSL code needs one translation unit like this one.
#include <asio/ssl/impl/src.hpp>
