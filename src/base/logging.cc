#include "base/logging.h"

namespace kestrel {

void set_log_level(const std::string& level) {
  auto lvl = spdlog::level::info;
  if (level == "debug") lvl = spdlog::level::debug;
  if (level == "warning" || level == "warn") lvl = spdlog::level::warn;
  if (level == "error") lvl = spdlog::level::err;
  spdlog::set_level(lvl);
  spdlog::set_pattern("%^%L%$ %m-%d %H:%M:%S [%s:%#] %v");
}

}  // namespace kestrel
