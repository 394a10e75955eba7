#include "tls/tls_stream.hpp"

#include <openssl/err.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "net/awaitable.hpp"
#include "net/drained_read.hpp"
#include "tls/ossl.hpp"

namespace meshnode::tls {
namespace {

using base::Errc;

// Enough for a few full records per recv() (the input buffer's size).
constexpr std::size_t kInputBuffer = 64 * 1024;
// Without our BIOs (out of memory), OpenSSL reads the socket itself, this much at once.
constexpr std::size_t kReadAhead = 64 * 1024;
// write_all() encrypts at most this much plaintext before sending it: bounds out_ and keeps the
// socket busy while the next piece is encrypted.
constexpr std::size_t kWritePiece = 256 * 1024;

// SSL_get_error reads this thread's error queue (ERR_peek_error), so the queue must be empty
// before each SSL call. ERR_clear_error empties it by freeing the file and function strings of
// all 16 slots, 32 free() calls even when there is nothing to clear: 5 % of a proxy's user time
// per 64 B message (issue 15). Peeking first costs one thread-local lookup.
void clear_error_queue() noexcept {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

// A failed recv's or send's errno as the error that ends the call: ECONNRESET or EPIPE → kReset,
// anything else → kIo.
std::unexpected<base::Error> socket_failure(int e, const char* what) {
  const std::error_code ec(e, std::system_category());
  return base::fail(e == ECONNRESET || e == EPIPE ? Errc::kReset : Errc::kIo, what, ec);
}

long out_bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }
int out_bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

}  // namespace

int TlsStream::bio_write(BIO* bio, const char* data, std::size_t len, std::size_t* written) {
  auto* self = static_cast<TlsStream*>(BIO_get_data(bio));
  const auto* p = reinterpret_cast<const std::byte*>(data);
  self->out_.insert(self->out_.end(), p, p + len);
  *written = len;
  return 1;
}

int TlsStream::bio_read(BIO* bio, char* data, std::size_t len, std::size_t* read) {
  auto* self = static_cast<TlsStream*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  *read = 0;
  const std::size_t n = std::min(len, self->input_unread());
  if (n == 0) {
    // Empty: "try again" until the socket reached EOF, then EOF (BIO_eof says which).
    if (!self->in_eof_) BIO_set_retry_read(bio);
    return 0;
  }
  std::memcpy(data, self->in_.get() + self->in_head_, n);
  self->in_head_ += n;
  *read = n;
  return 1;
}

long TlsStream::bio_in_ctrl(BIO* bio, int cmd, long, void*) {
  const auto* self = static_cast<const TlsStream*>(BIO_get_data(bio));
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_EOF: return self != nullptr && self->in_eof_ && self->input_unread() == 0 ? 1 : 0;
    case BIO_CTRL_PENDING: return self != nullptr ? static_cast<long>(self->input_unread()) : 0;
    default: return 0;
  }
}

namespace {

// Both created once; OpenSSL keeps a pointer to a method in every BIO made from it, so they are
// never freed.
BIO_METHOD* out_bio_method(int (*write)(BIO*, const char*, std::size_t, std::size_t*)) {
  static BIO_METHOD* const method = [write] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "meshnode TLS output buffer");
    if (m != nullptr) {
      BIO_meth_set_write_ex(m, write);
      BIO_meth_set_ctrl(m, &out_bio_ctrl);
      BIO_meth_set_create(m, &out_bio_create);
    }
    return m;
  }();
  return method;
}

BIO_METHOD* in_bio_method(int (*read)(BIO*, char*, std::size_t, std::size_t*), long (*ctrl)(BIO*, int, long, void*)) {
  static BIO_METHOD* const method = [read, ctrl] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "meshnode TLS input buffer");
    if (m != nullptr) {
      BIO_meth_set_read_ex(m, read);
      BIO_meth_set_ctrl(m, ctrl);
      BIO_meth_set_create(m, &out_bio_create);
    }
    return m;
  }();
  return method;
}

}  // namespace

TlsStream::TlsStream(asio::ip::tcp::socket socket, SSL* ssl) : socket_(std::move(socket)), ssl_(ssl) {
  std::error_code ignored;
  socket_.native_non_blocking(true, ignored);
  int fd = static_cast<int>(socket_.native_handle());
  BIO_METHOD* out_method = out_bio_method(&TlsStream::bio_write);
  BIO_METHOD* in_method = in_bio_method(&TlsStream::bio_read, &TlsStream::bio_in_ctrl);
  BIO* rbio = in_method != nullptr ? BIO_new(in_method) : nullptr;
  BIO* wbio = out_method != nullptr ? BIO_new(out_method) : nullptr;
  if (rbio != nullptr && wbio != nullptr) {
    // No read-ahead: OpenSSL asks our buffer for each record's header, then its body.
    SSL_set_bio(ssl_, rbio, wbio);
    buffers_output_ = true;
    bind_bio();
  } else {
    // Out of memory: fall back to OpenSSL on the socket itself (one send per record).
    BIO_free(rbio);
    BIO_free(wbio);
    SSL_set_fd(ssl_, fd);
    SSL_set_read_ahead(ssl_, 1);
    SSL_set_default_read_buffer_len(ssl_, kReadAhead);
  }
  SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
  // A peer that closes TCP without close_notify ends the stream like EOF (HBONE peers do).
  SSL_set_options(ssl_, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

TlsStream::TlsStream(TlsStream&& other) noexcept
    : socket_(std::move(other.socket_)),
      ssl_(std::exchange(other.ssl_, nullptr)),
      out_(std::move(other.out_)),
      out_head_(std::exchange(other.out_head_, 0)),
      in_(std::move(other.in_)),
      in_head_(std::exchange(other.in_head_, 0)),
      in_tail_(std::exchange(other.in_tail_, 0)),
      in_eof_(other.in_eof_),
      buffers_output_(other.buffers_output_),
      read_short_(other.read_short_) {
  bind_bio();
}

void TlsStream::bind_bio() noexcept {
  if (ssl_ == nullptr || !buffers_output_) return;
  BIO_set_data(SSL_get_wbio(ssl_), this);
  BIO_set_data(SSL_get_rbio(ssl_), this);
}

bool TlsStream::input_drained() const noexcept {
  return ssl_ != nullptr && buffers_output_ && read_short_ && input_unread() == 0 && SSL_has_pending(ssl_) == 0;
}

base::Result<void> TlsStream::try_send(const char* what) {
  while (out_head_ < out_.size()) {
    if (!socket_.is_open()) return base::fail(Errc::kClosed, std::string(what) + ": socket closed");
    ssize_t n = ::send(socket_.native_handle(), out_.data() + out_head_, out_.size() - out_head_, MSG_NOSIGNAL);
    if (n > 0) {
      out_head_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return {};  // the socket is full: the rest waits
    int e = n < 0 ? errno : EPIPE;
    return socket_failure(e, what);
  }
  out_head_ = 0;
  out_.clear();
  return {};
}

base::Result<void> TlsStream::write_now(std::span<const std::byte> data) {
  if (!buffers_output_) return base::fail(Errc::kInternal, "TLS write_now without an output buffer (use write_all)");
  while (!data.empty()) {
    clear_error_queue();
    std::size_t written = 0;
    if (SSL_write_ex(ssl_, data.data(), data.size(), &written) != 1) {
      std::string queued = openssl_errors();
      return base::fail(Errc::kTlsHandshake, "TLS write: " + (queued.empty() ? std::string("TLS error") : queued));
    }
    data = data.subspan(written);
  }
  return try_send("TLS write");
}

void TlsStream::release_idle_buffers() noexcept {
  if (!has_pending_output()) {
    std::vector<std::byte>().swap(out_);
    out_head_ = 0;
  }
  if (input_unread() == 0) {
    in_.reset();
    in_head_ = in_tail_ = 0;
  }
  // OpenSSL's own record buffers (~17 KiB to read a record into, as much to build one in);
  // refused, harmlessly, while either holds unprocessed bytes. The next read or write allocates
  // them again.
  if (ssl_ != nullptr) (void)SSL_free_buffers(ssl_);
}

asio::awaitable<base::Result<void>> TlsStream::fill_input(const char* what) {
  if (in_eof_) co_return base::fail(Errc::kClosed, std::string(what) + ": peer closed the connection");
  if (deferred_errno_ != 0) co_return socket_failure(std::exchange(deferred_errno_, 0), what);
  // After a short read the socket is most likely empty: the read goes into wait_buf_, and waits
  // there, so an idle connection can give its input buffer back (release_idle_buffers) while its
  // reader waits here for hours. Asio tries one recv before it waits, unless our last recv met
  // EAGAIN (net/drained_read.hpp), and queues the wait with no epoll_ctl, as a readiness wait
  // would need.
  bool small_first = read_short_;
  for (;;) {
    if (!socket_.is_open()) co_return base::fail(Errc::kClosed, std::string(what) + ": socket closed");
    std::size_t waited = 0;  // bytes read into wait_buf_
    if (small_first) {
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(wait_buf_), net::kNoThrow);
      if (ec == asio::error::eof) {
        in_eof_ = true;
        read_short_ = true;
        co_return base::Result<void>{};
      }
      if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe) co_return base::fail(Errc::kReset, what, ec);
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor || !socket_.is_open()) {
        co_return base::fail(Errc::kClosed, std::string(what) + ": socket closed", ec);
      }
      if (ec) co_return base::fail(Errc::kIo, what, ec);
      waited = n;
    }
    small_first = true;
    if (!in_) {
      in_ = std::make_unique_for_overwrite<std::byte[]>(kInputBuffer);
      in_head_ = in_tail_ = 0;
    }
    if (in_head_ == in_tail_) {
      in_head_ = in_tail_ = 0;
    } else if (kInputBuffer - in_tail_ < std::max<std::size_t>(waited, 1)) {
      // Only the start of one record can be left (OpenSSL takes whole records): move it to the front.
      std::memmove(in_.get(), in_.get() + in_head_, input_unread());
      in_tail_ -= in_head_;
      in_head_ = 0;
    }
    if (waited > 0) {
      std::memcpy(in_.get() + in_tail_, wait_buf_.data(), waited);
      in_tail_ += waited;
      if (waited < wait_buf_.size()) {
        read_short_ = true;
        co_return base::Result<void>{};
      }
      // It filled wait_buf_: more is likely there, read on without waiting.
    }
    const std::size_t room = kInputBuffer - in_tail_;
    if (room == 0) co_return base::Result<void>{};
    const ssize_t n = net::recv_noting_drained(socket_, in_.get() + in_tail_, room);
    if (n > 0) {
      in_tail_ += static_cast<std::size_t>(n);
      read_short_ = static_cast<std::size_t>(n) < room;
      co_return base::Result<void>{};
    }
    if (n == 0) {
      in_eof_ = true;
      read_short_ = true;
      co_return base::Result<void>{};
    }
    const int e = errno;
    const bool again = e == EAGAIN || e == EWOULDBLOCK;
    if (waited > 0) {
      // The records read before an error go to OpenSSL first (the peer's last DATA or GOAWAY
      // before its RST); the error, which the kernel reports only once, comes with the next read.
      if (!again) deferred_errno_ = e;
      read_short_ = true;
      co_return base::Result<void>{};
    }
    if (!again) co_return socket_failure(e, what);
  }
}

asio::awaitable<base::Result<void>> TlsStream::flush(const char* what) {
  for (;;) {
    if (auto sent = try_send(what); !sent) co_return sent;
    if (!has_pending_output()) co_return base::Result<void>{};
    auto [ec] = co_await socket_.async_wait(asio::ip::tcp::socket::wait_write, net::kNoThrow);
    if (ec) co_return base::fail(Errc::kClosed, std::string(what) + ": socket closed", ec);
  }
}

TlsStream::~TlsStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

bool TlsStream::negotiated_h2() const noexcept {
  const unsigned char* alpn = nullptr;
  unsigned int alpn_len = 0;
  SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
  return alpn_len == 2 && alpn[0] == 'h' && alpn[1] == '2';
}

void TlsStream::close() {
  std::error_code ignored;
  socket_.close(ignored);
}

asio::awaitable<base::Result<void>> TlsStream::wait_for(int ssl_error, int saved_errno, const char* what) {
  asio::ip::tcp::socket::wait_type wait;
  switch (ssl_error) {
    case SSL_ERROR_WANT_READ: wait = asio::ip::tcp::socket::wait_read; break;
    case SSL_ERROR_WANT_WRITE: wait = asio::ip::tcp::socket::wait_write; break;
    case SSL_ERROR_ZERO_RETURN: co_return base::fail(Errc::kClosed, std::string(what) + ": peer sent close_notify");
    case SSL_ERROR_SYSCALL: {
      std::string queued = openssl_errors();
      if (saved_errno == ECONNRESET || saved_errno == EPIPE) {
        co_return base::fail(Errc::kReset, what, std::error_code(saved_errno, std::system_category()));
      }
      if (saved_errno == 0) co_return base::fail(Errc::kClosed, std::string(what) + ": peer closed the connection");
      co_return base::fail(Errc::kIo, std::string(what) + (queued.empty() ? "" : ": " + queued),
                            std::error_code(saved_errno, std::system_category()));
    }
    default: {
      std::string queued = openssl_errors();
      co_return base::fail(Errc::kTlsHandshake, std::string(what) + ": " + (queued.empty() ? "TLS error" : queued));
    }
  }
  if (!socket_.is_open()) co_return base::fail(Errc::kClosed, std::string(what) + ": socket closed");
  auto [ec] = co_await socket_.async_wait(wait, net::kNoThrow);
  if (ec) co_return base::fail(Errc::kClosed, std::string(what) + ": socket closed", ec);
  co_return base::Result<void>{};
}

asio::awaitable<base::Result<void>> TlsStream::handshake(Role role) {
  if (role == Role::kClient) SSL_set_connect_state(ssl_);
  else SSL_set_accept_state(ssl_);
  for (;;) {
    clear_error_queue();
    int ret = SSL_do_handshake(ssl_);
    int saved_errno = errno;
    // Each flight goes out before waiting for the peer's answer to it.
    if (auto flushed = co_await flush("TLS handshake"); !flushed) {
      flushed.error().code = socket_.is_open() ? Errc::kTlsHandshake : Errc::kClosed;
      co_return flushed;
    }
    if (ret == 1) co_return base::Result<void>{};
    const int ssl_error = SSL_get_error(ssl_, ret);
    base::Result<void> ready;
    if (ssl_error == SSL_ERROR_WANT_READ && buffers_output_) ready = co_await fill_input("TLS handshake");
    else ready = co_await wait_for(ssl_error, saved_errno, "TLS handshake");
    if (!ready) {
      auto& error = ready.error();
      if (error.code == Errc::kClosed || error.code == Errc::kReset || error.code == Errc::kIo) {
        error.code = socket_.is_open() ? Errc::kTlsHandshake : Errc::kClosed;
      }
      co_return ready;
    }
  }
}

asio::awaitable<base::Result<std::size_t>> TlsStream::read_some(std::span<std::byte> buf) {
  for (;;) {
    clear_error_queue();
    std::size_t got = 0;
    int ret = SSL_read_ex(ssl_, buf.data(), buf.size(), &got);
    int saved_errno = errno;
    // A read may answer the peer (KeyUpdate): send it now if the socket takes it; a send error
    // is left for the next write to report, the read reports its own.
    if (has_pending_output()) (void)try_send("TLS read");
    if (ret == 1) co_return got;
    const int ssl_error = SSL_get_error(ssl_, ret);
    base::Result<void> ready;
    if (ssl_error == SSL_ERROR_WANT_READ && buffers_output_) ready = co_await fill_input("TLS read");
    else ready = co_await wait_for(ssl_error, saved_errno, "TLS read");
    if (!ready) {
      if (ready.error().code == Errc::kClosed && socket_.is_open()) co_return std::size_t{0};  // clean end
      co_return std::unexpected(std::move(ready.error()));
    }
  }
}

asio::awaitable<base::Result<void>> TlsStream::write_all(std::span<const std::byte> data) {
  while (!data.empty()) {
    clear_error_queue();
    std::size_t written = 0;
    int ret = SSL_write_ex(ssl_, data.data(), std::min(data.size(), kWritePiece), &written);
    int saved_errno = errno;
    if (ret == 1) {
      data = data.subspan(written);
      if (out_.size() - out_head_ >= kWritePiece) {
        if (auto flushed = co_await flush("TLS write"); !flushed) co_return flushed;
      }
      continue;
    }
    const int ssl_error = SSL_get_error(ssl_, ret);
    if (auto ready = co_await wait_for(ssl_error, saved_errno, "TLS write"); !ready) co_return ready;
  }
  co_return co_await flush("TLS write");
}

}  // namespace meshnode::tls
