// base/logging.h — the process logger (spdlog), with vLLM-like "LEVEL date [file] msg" lines.
#pragma once

#include <spdlog/spdlog.h>

namespace kestrel {

// Sets the global level from a name (debug, info, warning, error); unknown names keep info.
// The first call also points the process logger at stderr.
void set_log_level(const std::string& level);
// Starts every line with `prefix` (a worker process's "(Worker rank=1 pid=…)"); empty: none.
void set_log_prefix(const std::string& prefix);

}  // namespace kestrel

// Debug lines are compiled in (SPDLOG_DEBUG is not, below spdlog's default active level) and
// printed when the level is debug.
#define KLOG_DEBUG(...) \
  SPDLOG_LOGGER_CALL(::spdlog::default_logger_raw(), ::spdlog::level::debug, __VA_ARGS__)
#define KLOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define KLOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define KLOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
