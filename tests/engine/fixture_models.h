// The tiny checkpoints of tests/fixtures/models for engine tests: loaded in the activation dtype
// their goldens were made in (golden.json's "dtype").
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "base/mmap_file.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel::test {

inline std::string fixture_dir(const std::string& name) {
  return fixtures_dir() + "/models/" + name;
}

// The fixture's load options: its directory and golden dtype, `threads` compute threads.
inline LoadOptions fixture_options(const std::string& name, int threads) {
  LoadOptions o;
  o.model = fixture_dir(name);
  o.threads = threads;
  auto golden = read_text_file(o.model + "/golden.json");
  EXPECT_TRUE(golden.ok()) << o.model;
  if (golden.ok()) o.dtype = nlohmann::json::parse(*golden).at("dtype").get<std::string>();
  return o;
}

// Loads it (null, with a test failure, when it does not load).
inline std::unique_ptr<LoadedModel> load_fixture(const std::string& name, int threads,
                                                 Backend* shared = nullptr) {
  LoadOptions o = fixture_options(name, threads);
  o.shared_backend = shared;
  auto lm = load_model(o);
  EXPECT_TRUE(lm.ok()) << lm.error().message;
  return lm.ok() ? std::move(*lm) : nullptr;
}

}  // namespace kestrel::test
