// tests/cli/serve_args_fixture.h — what the `kestrel serve` flag tests share: a shell-like
// splitter for the guides' command lines, the ServeArgsTest fixture (parse + finalize, the
// refusal lines of an outcome) and the refusal texts docs/compatibility.md documents.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/mmap_file.h"
#include "cli/serve_args.h"
#include "test_paths.h"

namespace kestrel::cli::serve_test {

namespace fs = std::filesystem;

// Splits a command line as sh does for the guides' commands: blanks, '…', "…" and
// backslash-newline continuations. Variables are substituted by hand before.
inline std::vector<std::string> shell_split(std::string_view s) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size()) {
      if (s[i + 1] != '\n') {
        word += s[i + 1];
        in_word = true;
      }
      ++i;
    } else if (c == '\'' || c == '"') {
      const size_t end = std::min(s.find(c, i + 1), s.size());
      word.append(s.substr(i + 1, end - i - 1));
      in_word = true;
      i = end;
    } else if (c == ' ' || c == '\n' || c == '\t') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

struct Outcome {
  std::unique_ptr<ServeArgs> args = std::make_unique<ServeArgs>();
  std::string cli_error;  // from normalize_vllm_argv or CLI11; finalize did not run
  Status status;
};

class ServeArgsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kestrel_serve_args_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "model");
    std::ofstream(dir_ / "template.jinja") << "{{ messages }}";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    ::unsetenv("VLLM_API_KEY");
    ::unsetenv("KESTREL_API_KEY");
  }
  void TearDown() override { SetUp(); }

  static std::string model() { return (dir_ / "model").string(); }

  // Parses `cmdline` (the arguments after `serve`; @MODEL@ stands for an existing model
  // directory) as `kestrel serve` does.
  static Outcome serve(std::string cmdline) {
    for (size_t at; (at = cmdline.find("@MODEL@")) != std::string::npos;)
      cmdline.replace(at, 7, model());
    Outcome o;
    CLI::App app{"kestrel serve"};
    add_serve_args(app, *o.args);
    auto argv = normalize_vllm_argv(app, shell_split(cmdline));
    if (!argv.ok()) {
      o.cli_error = argv.error().message;
      return o;
    }
    std::vector<std::string> reversed(argv->rbegin(), argv->rend());  // CLI11's order
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      o.cli_error = e.what();
      return o;
    }
    o.status = finalize_serve_args(*o.args);
    return o;
  }

  // The refusal lines of an outcome that got through CLI11.
  static std::vector<std::string> refusals(const Outcome& o) {
    EXPECT_EQ(o.cli_error, "");
    std::vector<std::string> lines;
    if (o.status.ok()) return lines;
    std::istringstream in(o.status.message());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  static Outcome accepted(const std::string& cmdline) {
    Outcome o = serve(cmdline);
    EXPECT_EQ(o.cli_error, "") << cmdline;
    EXPECT_TRUE(o.status.ok()) << o.status.message();
    return o;
  }

  static bool has_note(const ServeArgs& a, std::string_view flag) {
    for (const std::string& n : a.notes)
      if (n.starts_with(flag)) return true;
    return false;
  }

  static inline fs::path dir_;
};

// Expected refusal texts (docs/compatibility.md §2–§9, §15).
inline std::string hub(std::string_view id) {
  return "model '" + std::string(id) +
         "': no such file or directory (Kestrel does not download models; download the "
         "checkpoint and pass its path)";
}
inline const std::string kTokenizerV41 =
    "--tokenizer-mode deepseek_v41: not supported yet (auto, hf, deepseek_v32, deepseek_v4)";
inline const std::string kToolV41 =
    "--tool-call-parser deepseek_v41: not supported (deepseek_v3, deepseek_v31, deepseek_v32, "
    "deepseek_v4, hermes, llama3_json, mistral, qwen3_coder)";
inline const std::string kReasoningV41 =
    "--reasoning-parser deepseek_v41: not supported (deepseek_r1, deepseek_v3, deepseek_v31, "
    "deepseek_v32, deepseek_v4, qwen3)";
inline const std::string kDspark =
    "--speculative-config method=dspark: DSpark drafting needs DeepSeek-V4.1, which Kestrel cannot "
    "load yet";
inline const std::string kEngram =
    "--engram-config: needs a model with Engram layers (DeepSeek-V4.1), which Kestrel does not "
    "support yet";

using Lines = std::vector<std::string>;

}  // namespace kestrel::cli::serve_test
