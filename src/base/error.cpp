#include "base/error.hpp"

namespace meshnode::base {

std::string_view to_string(Errc code) noexcept {
  switch (code) {
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kConfig: return "config";
    case Errc::kIo: return "io";
    case Errc::kTimeout: return "timeout";
    case Errc::kConnectFailed: return "connect_failed";
    case Errc::kTlsHandshake: return "tls_handshake";
    case Errc::kIdentityMismatch: return "identity_mismatch";
    case Errc::kPolicyDenied: return "policy_denied";
    case Errc::kNoHealthyUpstream: return "no_healthy_upstream";
    case Errc::kLimitExceeded: return "limit_exceeded";
    case Errc::kProtocol: return "protocol";
    case Errc::kReset: return "reset";
    case Errc::kClosed: return "closed";
    case Errc::kNotFound: return "not_found";
    case Errc::kRecursiveCall: return "recursive_call";
    case Errc::kCertificate: return "certificate";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

std::string Error::message() const {
  std::string out(to_string(code));
  if (!context.empty()) {
    out += ": ";
    out += context;
  }
  if (cause) {
    out += ": ";
    out += cause.message();
  }
  return out;
}

std::unexpected<Error> fail_errno(std::string context, int err) {
  return fail(Errc::kIo, std::move(context), std::error_code(err, std::system_category()));
}

std::string exception_message(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace meshnode::base
