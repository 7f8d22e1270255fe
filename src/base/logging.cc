#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace kestrel {

namespace {

std::string& log_prefix() {
  static std::string prefix;
  return prefix;
}

void apply_pattern() {
  spdlog::set_pattern(log_prefix() + "%^%L%$ %m-%d %H:%M:%S [%s:%#] %v");
}

}  // namespace

void set_log_prefix(const std::string& prefix) {
  log_prefix() = prefix.empty() ? "" : prefix + " ";
  apply_pattern();
}

void set_log_level(const std::string& level) {
  // Logs go to stderr: stdout carries commands' results (generated text, benchmark lines).
  static const bool to_stderr = [] {
    spdlog::set_default_logger(spdlog::stderr_color_mt("kestrel"));
    return true;
  }();
  (void)to_stderr;
  auto lvl = spdlog::level::info;
  if (level == "debug") lvl = spdlog::level::debug;
  if (level == "warning" || level == "warn") lvl = spdlog::level::warn;
  if (level == "error") lvl = spdlog::level::err;
  spdlog::set_level(lvl);
  apply_pattern();
}

}  // namespace kestrel
