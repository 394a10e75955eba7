#include "base/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>

#include <string>

namespace meshnode::base {

Result<void> init_logging(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return fail(Errc::kInvalidArgument, "unknown log level '" + std::string(level) + "'");
  }
  spdlog::drop("meshnode");
  auto logger = spdlog::stderr_logger_mt("meshnode");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ\t%l\t%v", spdlog::pattern_time_type::utc);
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return {};
}

}  // namespace meshnode::base
