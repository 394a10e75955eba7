#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "base/error.hpp"

namespace meshnode::base {

/// Configures the process-wide spdlog logger: stderr, `key=value` friendly plain format
/// ("<RFC3339 µs UTC> <level> <message>"). `level` is trace|debug|info|warn|error|off;
/// Errc::kInvalidArgument for anything else.
///
/// A logging call does not write(2): the line is formatted (in call order) into a bounded buffer
/// that a writer thread empties within 10 ms, every line queued meanwhile in one write. Past 1 MiB queued a line is
/// dropped and counted; warning and error lines are limited to 50/s after a burst of 500, the
/// excess counted and reported in a later line. Critical lines are written before the call returns.
[[nodiscard]] Result<void> init_logging(std::string_view level);

/// Waits until every line logged so far is written to stderr (shutdown; the logger's destructor
/// at exit does the same).
void flush_logging();

}  // namespace meshnode::base
