#pragma once

#include <openssl/ssl.h>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace meshnode::tls {

/// TLS over a connected TCP socket: the one OpenSSL I/O wrapper of the project (its errors are
/// read with tls::openssl_errors, like every other OpenSSL call). Both directions go through
/// buffers of ours (two small custom BIOs). Input: we read the socket into a 64 KiB buffer (one
/// recv() for several records; after a short read, a 2 KiB one, which a waiting reader holds
/// instead, see fill_input) and OpenSSL takes each record from it, header then body, so
/// its own record buffer never holds
/// more than one record (with OpenSSL's read-ahead it moved every unread record to the buffer's
/// start before each one: 1.5 bytes moved per byte received in bulk). Output: records collect in a
/// buffer sent with one send() per batch, so a 64 KiB write costs one syscall and one TCP segment
/// train instead of one per 16 KiB record.
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
  /// True when our buffers are installed (always, unless a BIO could not be allocated; then
  /// OpenSSL reads and writes the socket itself).
  [[nodiscard]] bool buffers_output() const noexcept { return buffers_output_; }
  /// True while ciphertext waits for the socket (only after a read produced some, or an error).
  [[nodiscard]] bool has_pending_output() const noexcept { return out_head_ < out_.size(); }
  /// Frees the output buffer if nothing is queued (it keeps its capacity between writes, sized
  /// by the largest batch; an idle connection should not), the input buffer if it holds no
  /// unread bytes, and OpenSSL's record buffers (~34 KiB, kept while the connection is busy)
  /// unless they hold unprocessed bytes. For a connection that has gone idle; it stays usable
  /// (the next read or write allocates again).
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
  /// Reads the socket into the input buffer (after what is still unread there), waiting until
  /// it has bytes (after a short read: one recv into wait_buf_, and when that finds nothing, a
  /// queued read there, so a waiting reader holds no input buffer). TCP EOF is success with in_eof_ set (OpenSSL then sees the end of its input);
  /// ECONNRESET → Errc::kReset, a closed socket → Errc::kClosed, any other error → Errc::kIo.
  [[nodiscard]] asio::awaitable<base::Result<void>> fill_input(const char* what);
  /// The write BIO's callback: appends OpenSSL's records to out_.
  static int bio_write(BIO* bio, const char* data, std::size_t len, std::size_t* written);
  /// The read BIO's callbacks: hand out bytes of the input buffer; "retry" when it is empty,
  /// EOF once the socket reached it.
  static int bio_read(BIO* bio, char* data, std::size_t len, std::size_t* read);
  static long bio_in_ctrl(BIO* bio, int cmd, long num, void* ptr);
  void bind_bio() noexcept;
  [[nodiscard]] std::size_t input_unread() const noexcept { return in_tail_ - in_head_; }

  asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  std::vector<std::byte> out_;  ///< ciphertext not yet taken by the socket, from out_head_ on
  std::size_t out_head_ = 0;
  std::unique_ptr<std::byte[]> in_;  ///< ciphertext read from the socket, unread in [in_head_, in_tail_)
  std::size_t in_head_ = 0;
  std::size_t in_tail_ = 0;
  bool in_eof_ = false;          ///< the socket read EOF: once in_ is drained, OpenSSL sees EOF
  bool buffers_output_ = false;  ///< our BIOs are installed (else OpenSSL reads and writes the socket)
  bool read_short_ = false;      ///< the socket's last read gave less than asked (see input_drained)
  int deferred_errno_ = 0;       ///< a recv error met after bytes were read, for the next fill_input
  /// Where the read after a short one, and the read that waits for the socket, put what they
  /// get: an idle reader holds no input buffer. 2 KiB, kept for the stream's life (one per HBONE
  /// connection, not per tunnel): a 1 KiB HTTP message's record fits, so it costs one recv, where
  /// a one-byte peek as the wait would cost a second.
  std::array<std::byte, 2048> wait_buf_;
};

}  // namespace meshnode::tls
