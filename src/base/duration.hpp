#pragma once

#include <chrono>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::base {

/// The longest duration parse_duration accepts: 100 years, far beyond any timeout or TTL and far
/// inside milliseconds' 64-bit range.
inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365 * 100);

/// "24h", "90m", "30s", "500ms" or a bare number of seconds (fractions allowed: "1.5s") →
/// milliseconds, truncated.
/// @returns Errc::kConfig naming the text when it is not a non-negative finite number with one of
///          those units, or is longer than kMaxDuration ("1e300" would otherwise overflow the
///          integer conversion, which is undefined behaviour — issue 11 defect 7).
[[nodiscard]] Result<std::chrono::milliseconds> parse_duration(std::string_view text);

}  // namespace meshnode::base
