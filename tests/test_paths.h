// tests/test_paths.h — where tests find committed fixtures and the data that lives outside the
// repository (the shared test data and the default model), and how a test that needs the latter
// skips or fails when it is absent.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

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
// Where the scripts/fetch-*.sh place a model file, whether or not it is there.
inline std::string cached_model_path(const std::string& file) {
  std::string dir;
  if (const char* m = std::getenv("KESTREL_MODELS")) {
    dir = m;
  } else if (const char* h = std::getenv("HOME")) {
    dir = std::string(h) + "/.cache/kestrel/models";
  }
  return dir + "/" + file;
}
// The default model (scripts/fetch-default-model.sh).
inline std::string default_model_path() {
  return cached_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
}
// Gemma3-270M (scripts/fetch-gemma3.sh).
inline std::string gemma3_model_path() {
  return cached_model_path("gemma-3-270m-q4_k_m.gguf");
}
// KESTREL_REQUIRE_TEST_DATA set, non-empty and not "0" (scripts/test.sh, hence CI): the data
// outside the repository must be present, so a test missing it fails instead of skipping.
inline bool test_data_required() {
  const char* v = std::getenv("KESTREL_REQUIRE_TEST_DATA");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

}  // namespace kestrel::test

// Skips the current test when `path` (data outside the repository: under shared_dir(), or the
// default model) does not exist, or fails it when test_data_required(). Only for a truly absent
// file: one that exists but does not load is the code under test failing, and committed fixtures
// are asserted, never skipped on. GTEST_SKIP/GTEST_FAIL `return`, so this ends the test only when
// used directly in a test body or SetUp().
#define KESTREL_SKIP_IF_ABSENT(path, what)                                 \
  do {                                                                     \
    const std::string kestrel_needed_path_ = (path);                       \
    if (!std::filesystem::exists(kestrel_needed_path_)) {                  \
      if (::kestrel::test::test_data_required()) {                         \
        GTEST_FAIL() << (what) << " is missing: " << kestrel_needed_path_  \
                     << " (KESTREL_REQUIRE_TEST_DATA is set)";             \
      } else {                                                             \
        GTEST_SKIP() << (what) << " is missing: " << kestrel_needed_path_; \
      }                                                                    \
    }                                                                      \
  } while (0)
