#pragma once

#include <exception>
#include <expected>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace meshnode::base {

/// Error codes, named after what an operator greps for. Small on purpose: the context string of
/// `Error` carries the detail (which file, which peer, which key).
enum class Errc {
  kInvalidArgument,     ///< a caller passed a value that cannot be used
  kConfig,              ///< configuration content is wrong (file:line and key in the context)
  kIo,                  ///< a syscall failed; `cause` holds errno
  kTimeout,             ///< a deadline passed (connect, handshake, CONNECT response)
  kConnectFailed,       ///< TCP connect to an upstream failed
  kTlsHandshake,        ///< TLS handshake failed (certificate, version, ALPN)
  kIdentityMismatch,    ///< the peer's SPIFFE identity is not one we expected
  kPolicyDenied,        ///< authorization policy rejected the connection
  kNoHealthyUpstream,   ///< a service has no usable endpoint
  kLimitExceeded,       ///< a resource bound was reached (concurrent handshakes, pooled connections)
  kProtocol,            ///< the peer broke a protocol (HTTP/2, HBONE, socks5)
  kReset,               ///< the peer reset the connection or stream
  kClosed,              ///< the connection or stream is closed
  kNotFound,            ///< a lookup found nothing
  kRecursiveCall,       ///< a connection targets one of our own ports (capture loop)
  kCertificate,         ///< a certificate could not be issued, loaded or parsed
  kInternal,            ///< a bug or an unexpected library failure
};

/// Stable lowercase name of an error code, e.g. "policy_denied" (used in logs and metric labels).
std::string_view to_string(Errc code) noexcept;

/// A failure: a code to branch on, a context string for humans, an optional OS/library cause.
struct Error {
  Errc code = Errc::kInternal;
  std::string context;
  std::error_code cause;

  /// "<code>: <context>[: <cause message>]", the form used in every log line.
  [[nodiscard]] std::string message() const;
};

template <class T>
using Result = std::expected<T, Error>;

/// Builds the error side of a `Result`: `return fail(Errc::kConfig, "bad key");`.
[[nodiscard]] inline std::unexpected<Error> fail(Errc code, std::string context, std::error_code cause = {}) {
  return std::unexpected<Error>(Error{code, std::move(context), cause});
}

/// `fail(Errc::kIo, context, errno)` for the common case of a failed syscall.
[[nodiscard]] std::unexpected<Error> fail_errno(std::string context, int err);

/// what() of the exception in `error` (not null), or "unknown exception" for a non-std one: for the
/// one log line of a task that ended with an exception.
[[nodiscard]] std::string exception_message(const std::exception_ptr& error);

}  // namespace meshnode::base
