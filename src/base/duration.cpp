#include "base/duration.hpp"

#include <charconv>
#include <cmath>
#include <string>

namespace meshnode::base {

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  // from_chars also reads "inf" and "nan": neither is a duration.
  if (ec != std::errc() || !std::isfinite(value) || value < 0) {
    return fail(Errc::kConfig, "invalid duration '" + std::string(text) + "'");
  }
  double ms = 0;
  if (unit.empty() || unit == "s") {
    ms = value * 1000;
  } else if (unit == "ms") {
    ms = value;
  } else if (unit == "m") {
    ms = value * 60'000;
  } else if (unit == "h") {
    ms = value * 3'600'000;
  } else {
    return fail(Errc::kConfig, "invalid duration unit in '" + std::string(text) + "' (use ms, s, m or h)");
  }
  // Compared as doubles, before the conversion: converting an out-of-range double is UB.
  if (ms > static_cast<double>(kMaxDuration.count())) {
    return fail(Errc::kConfig, "duration '" + std::string(text) + "' is longer than 100 years");
  }
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

}  // namespace meshnode::base
