#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "base/error.hpp"

namespace meshnode::base {

/// Configures the process-wide spdlog logger: stderr, `key=value` friendly plain format
/// ("<RFC3339 µs UTC> <level> <message>"). `level` is trace|debug|info|warn|error|off;
/// Errc::kInvalidArgument for anything else.
[[nodiscard]] Result<void> init_logging(std::string_view level);

}  // namespace meshnode::base
