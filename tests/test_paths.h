// tests/test_paths.h — where tests find committed fixtures and the shared test data.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kestrel::test {

inline std::string source_dir() {
  return KESTREL_SOURCE_DIR;
}
inline std::string fixtures_dir() {
  return source_dir() + "/tests/fixtures";
}
// ../shared beside the checkout (CI lays it there); KESTREL_SHARED overrides.
inline std::string shared_dir() {
  if (const char* s = std::getenv("KESTREL_SHARED")) return s;
  return source_dir() + "/../shared";
}
inline std::string kestrel_binary() {
  return std::string(KESTREL_BINARY_DIR) + "/src/kestrel";
}
// The default model, when scripts/fetch-default-model.sh has placed it (empty when absent).
inline std::string default_model_path() {
  std::string dir;
  if (const char* m = std::getenv("KESTREL_MODELS")) {
    dir = m;
  } else if (const char* h = std::getenv("HOME")) {
    dir = std::string(h) + "/.cache/kestrel/models";
  }
  std::string path = dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(path) ? path : std::string();
}

}  // namespace kestrel::test
