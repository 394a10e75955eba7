#pragma once

#include <string>
#include <string_view>

namespace meshnode::cni {

/// The CNI spec version this plugin prefers: used for VERSION output and for error objects whose
/// configuration could not be read (CNI spec 1.0 §Error leaves that case open; maintainers suggest
/// the plugin's preferred version).
inline constexpr std::string_view kPreferredVersion = "1.0.0";

/// Spec versions we accept in a network configuration, in ascending order (CNI spec 1.0 §VERSION).
/// 0.3.x/0.4.0 results have the same shape as 1.0.0 for the parts we read (`ips[].address`,
/// `ips[].gateway`, `ips[].interface`).
inline constexpr std::string_view kSupportedVersions[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0"};

/// Well-known error codes (CNI spec 1.0 §Error). 100+ are plugin-specific; 999 is the spec's
/// "internal error", which we use for every failure involving the node agent.
enum class ErrorCode : int {
  kIncompatibleVersion = 1,   ///< cniVersion of the configuration is not in kSupportedVersions
  kUnsupportedField = 2,      ///< a configuration field we do not support
  kUnknownContainer = 3,      ///< container unknown or does not exist
  kInvalidEnvironment = 4,    ///< a CNI_* variable is missing or malformed (msg names it)
  kIoFailure = 5,             ///< reading stdin or writing stdout failed
  kDecodeFailure = 6,         ///< stdin is not a JSON document
  kInvalidNetworkConfig = 7,  ///< valid JSON, but a field has the wrong type or value
  kTryAgainLater = 11,        ///< transient condition; the runtime should retry
  kInternal = 999,            ///< node agent unreachable, timed out or refused the pod
};

/// A CNI error object (CNI spec 1.0 §Error): printed on stdout with a non-zero exit status.
struct CniError {
  std::string cni_version{kPreferredVersion};  ///< the configuration's cniVersion when known
  ErrorCode code = ErrorCode::kInternal;
  std::string msg;      ///< short message; for code 4 it names the variable
  std::string details;  ///< long message (agent reason, parser position); omitted when empty

  /// `{"cniVersion":…,"code":N,"msg":…,"details":…}` (`details` only when non-empty). Invalid UTF-8
  /// in msg/details (e.g. an agent's reply) is replaced, never throws.
  [[nodiscard]] std::string to_json() const;
};

/// The exact VERSION output (CNI spec 1.0 §VERSION):
/// `{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]}`.
[[nodiscard]] std::string version_json();

/// True if `version` is one of kSupportedVersions (exact string match, as libcni does).
[[nodiscard]] bool is_supported_version(std::string_view version) noexcept;

/// True if `version` supports the CHECK verb (introduced in CNI spec 0.4.0, §CHECK).
[[nodiscard]] bool supports_check(std::string_view version) noexcept;

}  // namespace meshnode::cni
