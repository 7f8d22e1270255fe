// The tiny checkpoints of tests/fixtures/models for engine tests: loaded in the activation dtype
// their goldens were made in (golden.json's "dtype").
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

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

// Its golden prompts and transformers' greedy continuations of them (golden.json).
struct FixtureGolden {
  std::vector<std::vector<int32_t>> prompts, greedy;
};
inline FixtureGolden read_fixture_golden(const std::string& name) {
  FixtureGolden g;
  auto text = read_text_file(fixture_dir(name) + "/golden.json");
  EXPECT_TRUE(text.ok()) << name;
  if (!text.ok()) return g;
  const auto j = nlohmann::json::parse(*text);
  g.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  g.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
  return g;
}

}  // namespace kestrel::test
