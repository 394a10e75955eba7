#pragma once

#include <openssl/ssl.h>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "base/error.hpp"

namespace meshnode::h2 {

/// TLS over a connected TCP socket, with OpenSSL reading and writing the socket itself (a socket
/// BIO on the non-blocking fd) and Asio only waiting for readiness. Compared with an Asio
/// ssl::stream this saves two copies of every byte (no BIO pair) and the per-record engine
/// round-trips; read-ahead lets one recv() fill several records.
/// One read and one write may be in flight at once (the HTTP/2 reader and writer coroutines):
/// OpenSSL is only ever called from the owning io_context thread, never concurrently.
class TlsStream {
 public:
  enum class Role { kClient, kServer };

  /// Takes ownership of `ssl` (made from the identity's SSL_CTX) and binds it to `socket`.
  TlsStream(asio::ip::tcp::socket socket, SSL* ssl);
  ~TlsStream();
  TlsStream(TlsStream&& other) noexcept;
  TlsStream& operator=(TlsStream&&) = delete;
  TlsStream(const TlsStream&) = delete;

  /// Runs the handshake. Errc::kTlsHandshake with OpenSSL's reason; Errc::kClosed if the socket
  /// was closed meanwhile (e.g. by a deadline).
  asio::awaitable<base::Result<void>> handshake(Role role);
  /// Reads 1..buf.size() plaintext bytes; 0 = the peer closed (close_notify or TCP EOF).
  /// Errc::kReset on ECONNRESET, Errc::kTlsHandshake on a TLS error, Errc::kClosed if closed.
  asio::awaitable<base::Result<std::size_t>> read_some(std::span<std::byte> buf);
  /// Writes all of `data` as TLS records. Errors as read_some.
  asio::awaitable<base::Result<void>> write_all(std::span<const std::byte> data);
  /// Closes the TCP socket; pending reads and writes complete with Errc::kClosed.
  void close();

  [[nodiscard]] SSL* native_handle() const noexcept { return ssl_; }
  [[nodiscard]] bool is_open() const noexcept { return socket_.is_open(); }
  asio::ip::tcp::socket& socket() noexcept { return socket_; }
  auto get_executor() { return socket_.get_executor(); }

 private:
  /// Waits for what OpenSSL asked for after a failed call; returns the error that ends the
  /// operation, or nothing to retry. `ssl_error` = SSL_get_error and `saved_errno` = errno, both
  /// taken right after the failed call.
  asio::awaitable<std::optional<base::Error>> wait_for(int ssl_error, int saved_errno, const char* what);

  asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
};

}  // namespace meshnode::h2
