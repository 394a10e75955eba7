#include "h2/tls_stream.hpp"

#include <openssl/err.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "net/awaitable.hpp"

namespace meshnode::h2 {
namespace {

using base::Errc;

// Enough for a few full records per recv(): with read-ahead OpenSSL reads up to this much at once.
constexpr std::size_t kReadAhead = 64 * 1024;

std::string drain_errors() {
  std::string out;
  char buf[256];
  while (unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

}  // namespace

TlsStream::TlsStream(asio::ip::tcp::socket socket, SSL* ssl) : socket_(std::move(socket)), ssl_(ssl) {
  std::error_code ignored;
  socket_.native_non_blocking(true, ignored);
  SSL_set_fd(ssl_, static_cast<int>(socket_.native_handle()));
  SSL_set_read_ahead(ssl_, 1);
  SSL_set_default_read_buffer_len(ssl_, kReadAhead);
  SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
  // A peer that closes TCP without close_notify ends the stream like EOF (HBONE peers do).
  SSL_set_options(ssl_, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

TlsStream::TlsStream(TlsStream&& other) noexcept
    : socket_(std::move(other.socket_)), ssl_(std::exchange(other.ssl_, nullptr)) {}

TlsStream::~TlsStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

void TlsStream::close() {
  std::error_code ignored;
  socket_.close(ignored);
}

asio::awaitable<std::optional<base::Error>> TlsStream::wait_for(int ssl_error, int saved_errno, const char* what) {
  asio::ip::tcp::socket::wait_type wait;
  switch (ssl_error) {
    case SSL_ERROR_WANT_READ: wait = asio::ip::tcp::socket::wait_read; break;
    case SSL_ERROR_WANT_WRITE: wait = asio::ip::tcp::socket::wait_write; break;
    case SSL_ERROR_ZERO_RETURN: co_return base::Error{Errc::kClosed, std::string(what) + ": peer sent close_notify"};
    case SSL_ERROR_SYSCALL: {
      std::string queued = drain_errors();
      if (saved_errno == ECONNRESET || saved_errno == EPIPE) {
        co_return base::Error{Errc::kReset, what, std::error_code(saved_errno, std::system_category())};
      }
      if (saved_errno == 0) co_return base::Error{Errc::kClosed, std::string(what) + ": peer closed the connection"};
      co_return base::Error{Errc::kIo, std::string(what) + (queued.empty() ? "" : ": " + queued),
                            std::error_code(saved_errno, std::system_category())};
    }
    default: {
      std::string queued = drain_errors();
      co_return base::Error{Errc::kTlsHandshake, std::string(what) + ": " + (queued.empty() ? "TLS error" : queued)};
    }
  }
  if (!socket_.is_open()) co_return base::Error{Errc::kClosed, std::string(what) + ": socket closed"};
  auto [ec] = co_await socket_.async_wait(wait, net::kNoThrow);
  if (ec) co_return base::Error{Errc::kClosed, std::string(what) + ": socket closed", ec};
  co_return std::nullopt;
}

asio::awaitable<base::Result<void>> TlsStream::handshake(Role role) {
  if (role == Role::kClient) SSL_set_connect_state(ssl_);
  else SSL_set_accept_state(ssl_);
  for (;;) {
    ERR_clear_error();
    int ret = SSL_do_handshake(ssl_);
    int saved_errno = errno;
    if (ret == 1) co_return base::Result<void>{};
    if (auto error = co_await wait_for(SSL_get_error(ssl_, ret), saved_errno, "TLS handshake")) {
      if (error->code == Errc::kClosed || error->code == Errc::kReset || error->code == Errc::kIo) {
        error->code = socket_.is_open() ? Errc::kTlsHandshake : Errc::kClosed;
      }
      co_return std::unexpected(std::move(*error));
    }
  }
}

asio::awaitable<base::Result<std::size_t>> TlsStream::read_some(std::span<std::byte> buf) {
  for (;;) {
    ERR_clear_error();
    std::size_t got = 0;
    int ret = SSL_read_ex(ssl_, buf.data(), buf.size(), &got);
    int saved_errno = errno;
    if (ret == 1) co_return got;
    if (auto error = co_await wait_for(SSL_get_error(ssl_, ret), saved_errno, "TLS read")) {
      if (error->code == Errc::kClosed && socket_.is_open()) co_return std::size_t{0};  // clean end
      co_return std::unexpected(std::move(*error));
    }
  }
}

asio::awaitable<base::Result<void>> TlsStream::write_all(std::span<const std::byte> data) {
  while (!data.empty()) {
    ERR_clear_error();
    std::size_t written = 0;
    int ret = SSL_write_ex(ssl_, data.data(), data.size(), &written);
    int saved_errno = errno;
    if (ret == 1) {
      data = data.subspan(written);
      continue;
    }
    if (auto error = co_await wait_for(SSL_get_error(ssl_, ret), saved_errno, "TLS write")) co_return std::unexpected(std::move(*error));
  }
  co_return base::Result<void>{};
}

}  // namespace meshnode::h2
