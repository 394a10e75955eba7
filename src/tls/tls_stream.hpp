#pragma once

#include <openssl/ssl.h>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace meshnode::tls {

/// TLS over a connected TCP socket: the one OpenSSL I/O wrapper of the project (its errors are
/// read with tls::openssl_errors, like every other OpenSSL call). OpenSSL reads the non-blocking fd itself (a socket BIO, with
/// read-ahead so one recv() fills several records); its output goes to a buffer of ours (a small
/// custom BIO) that is sent with one send() per batch, so a 64 KiB write costs one syscall and
/// one TCP segment train instead of one per 16 KiB record. Asio only waits for readiness.
/// One read and one write may be in flight at once (the HTTP/2 reader and writer coroutines):
/// OpenSSL is only ever called from the owning io_context thread, never concurrently. Ciphertext
/// produced by a read (a KeyUpdate answer) is sent at once if the socket takes it, else by the
/// next write_all().
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
  /// Writes all of `data` as TLS records and waits until the socket has taken every byte of
  /// ciphertext queued so far (an empty `data` only flushes). Errors as read_some.
  asio::awaitable<base::Result<void>> write_all(std::span<const std::byte> data);
  /// Encrypts all of `data` into the output buffer and sends what the socket takes now, without
  /// waiting: the caller's latency-sensitive path (one small message) skips a coroutine switch.
  /// Bytes the socket did not take stay queued (has_pending_output) for write_all. Only when
  /// `buffers_output()`; else Errc::kInternal, doing nothing (OpenSSL writes the socket itself:
  /// use write_all). Errc::kTlsHandshake on a TLS error, kReset/kIo/kClosed on a send error.
  [[nodiscard]] base::Result<void> write_now(std::span<const std::byte> data);
  /// True when the next read_some would have to go to the socket, and the socket's last read
  /// returned less than OpenSSL asked for (or nothing): a reader that has just handed off
  /// what it read can let its consumers run before it tries the socket again, which then most
  /// likely answers EAGAIN (request/response traffic). A hint, never a promise: false whenever
  /// unsure (before the first read, with OpenSSL on the fd itself).
  [[nodiscard]] bool input_drained() const noexcept;
  /// True when our output buffer is installed (always, unless the BIO could not be allocated).
  [[nodiscard]] bool buffers_output() const noexcept { return buffers_output_; }
  /// True while ciphertext waits for the socket (only after a read produced some, or an error).
  [[nodiscard]] bool has_pending_output() const noexcept { return out_head_ < out_.size(); }
  /// Frees the output buffer if nothing is queued (it keeps its capacity between writes, sized
  /// by the largest batch; an idle connection should not), and OpenSSL's record buffers (~81 KiB,
  /// kept while the connection is busy) unless they hold unprocessed bytes. For a connection
  /// that has gone idle; it stays usable (the next read or write allocates again).
  void release_idle_buffers() noexcept;
  /// Bytes the output buffer holds allocated (its capacity; 0 after release_idle_buffers).
  [[nodiscard]] std::size_t output_capacity() const noexcept { return out_.capacity(); }
  /// Closes the TCP socket; pending reads and writes complete with Errc::kClosed.
  void close();

  /// True when the handshake negotiated ALPN "h2" (HBONE requires it on both sides).
  [[nodiscard]] bool negotiated_h2() const noexcept;

  [[nodiscard]] SSL* native_handle() const noexcept { return ssl_; }
  [[nodiscard]] bool is_open() const noexcept { return socket_.is_open(); }
  asio::ip::tcp::socket& socket() noexcept { return socket_; }
  auto get_executor() { return socket_.get_executor(); }

 private:
  /// Waits for what OpenSSL asked for after a failed call. @returns success when the call is to be
  /// retried, else the error that ends the operation (close_notify → kClosed, ECONNRESET → kReset,
  /// a TLS error → kTlsHandshake). `ssl_error` = SSL_get_error and `saved_errno` = errno, both
  /// taken right after the failed call.
  [[nodiscard]] asio::awaitable<base::Result<void>> wait_for(int ssl_error, int saved_errno, const char* what);
  /// Sends queued ciphertext without blocking. @returns success when all was sent or the socket is
  /// full (the rest stays queued); the send error otherwise (kReset, kIo, kClosed).
  [[nodiscard]] base::Result<void> try_send(const char* what);
  /// Sends all queued ciphertext, waiting for writability as needed. Errors as try_send.
  [[nodiscard]] asio::awaitable<base::Result<void>> flush(const char* what);
  /// The write BIO's callback: appends OpenSSL's records to out_.
  static int bio_write(BIO* bio, const char* data, std::size_t len, std::size_t* written);
  /// The read BIO's callback (BIO_set_callback_ex): records whether each socket read was short.
  static long bio_read_watch(BIO* bio, int oper, const char* argp, std::size_t len, int argi, long argl, int ret,
                             std::size_t* processed);
  void bind_bio() noexcept;

  asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  std::vector<std::byte> out_;  ///< ciphertext not yet taken by the socket, from out_head_ on
  std::size_t out_head_ = 0;
  bool buffers_output_ = false;  ///< our output BIO is installed (else OpenSSL writes the socket)
  bool read_short_ = false;      ///< the socket's last read gave less than asked (see input_drained)
};

}  // namespace meshnode::tls
