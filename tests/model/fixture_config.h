// tests/model/fixture_config.h — a model fixture's directory and config.json, and a copy of a
// fixture whose config.json is edited (its other files linked), for tests that change one key.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "base/mmap_file.h"
#include "test_paths.h"

namespace kestrel::test {

inline std::string model_fixture(const std::string& name) {
  return fixtures_dir() + "/models/" + name;
}

inline nlohmann::json fixture_config(const std::string& name) {
  auto text = read_text_file(model_fixture(name) + "/config.json");
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
}

// A temporary directory holding fixture `name` with `changes` merged into its config.json.
inline std::string edited_fixture(const std::string& name, const nlohmann::json& changes) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() /
      ("kestrel_edited_" + name + "_" + std::to_string(std::hash<std::string>()(changes.dump())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(model_fixture(name)))
    if (e.path().filename() != "config.json")
      fs::create_symlink(e.path(), dir / e.path().filename());
  nlohmann::json j = fixture_config(name);
  j.update(changes);
  std::ofstream(dir / "config.json") << j.dump();
  return dir.string();
}

}  // namespace kestrel::test
