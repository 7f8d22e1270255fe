// `kestrel tokenize` end to end: JSON lines through the real binary, ids checked against
// transformers (tests/fixtures/smollm2/tokenize_golden.json, tools/make_tokenizer_goldens.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/mmap_file.h"
#include "cli/run_kestrel.h"
#include "test_paths.h"

namespace kestrel {
namespace {

struct CliResult {
  int code = -1;
  std::vector<nlohmann::json> lines;  // stdout, one JSON value per line
  std::string err;
};

CliResult run_tokenize(const std::string& args, const std::string& input) {
  const test::CliRun run = test::run_kestrel("tokenize " + args, input);
  CliResult r{run.code, {}, run.err};
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    r.lines.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return r;
}

TEST(TokenizeCli, DefaultModelMatchesTransformers) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model (scripts/fetch-default-model.sh)");
  auto text = read_text_file(test::fixtures_dir() + "/smollm2/tokenize_golden.json");
  ASSERT_TRUE(text.ok());
  const auto golden = nlohmann::json::parse(*text);
  std::string input;
  for (const auto& c : golden["cases"]) input += nlohmann::json{{"text", c["text"]}}.dump() + "\n";
  const CliResult r = run_tokenize("--tokenizer " + model + " --no-special-tokens", input);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), golden["cases"].size());
  for (size_t i = 0; i < r.lines.size(); ++i) {
    const auto& c = golden["cases"][i];
    EXPECT_EQ(r.lines[i]["ids"], c["ids"]) << c["text"];
    EXPECT_EQ(r.lines[i]["decoded"], c["text"]);
  }
}

TEST(TokenizeCli, BadLinesGiveErrorsAndTheRestContinues) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model (scripts/fetch-default-model.sh)");
  const std::string input =
      "{\"text\": \"Hello world\"}\n"
      "{\"text\": \n"
      "\n"
      "[1, 2]\n"
      "{\"text\": 5}\n"
      "{\"text\": \"<|im_start|>\"}\n";
  const CliResult r = run_tokenize("--tokenizer " + model, input);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 5u);
  EXPECT_EQ(r.lines[0]["ids"], nlohmann::json({19556, 905}));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE(r.lines[i].contains("error")) << r.lines[i];
    EXPECT_FALSE(r.lines[i].contains("ids"));
  }
  // <|im_start|> is token 1 in SmolLM2's vocabulary, and decoding keeps it.
  EXPECT_EQ(r.lines[4]["ids"], nlohmann::json({1}));
  EXPECT_EQ(r.lines[4]["decoded"], "<|im_start|>");
}

TEST(TokenizeCli, SpecialTokensFlag) {
  const std::string dir = test::shared_dir() + "/testdata/tokenizers/llama3_1";
  KESTREL_SKIP_IF_ABSENT(dir + "/tokenizer.json", "the shared llama3_1 tokenizer");
  const std::string input = "{\"text\": \"Hello world\"}\n";
  const CliResult with = run_tokenize("--tokenizer " + dir, input);
  ASSERT_EQ(with.code, 0) << with.err;
  const CliResult without = run_tokenize("--tokenizer " + dir + " --no-special-tokens", input);
  ASSERT_EQ(without.code, 0) << without.err;
  ASSERT_EQ(with.lines.size(), 1u);
  ASSERT_EQ(without.lines.size(), 1u);
  // Llama 3 adds <|begin_of_text|> (128000) in front; "Hello world" is 9906, 1917.
  EXPECT_EQ(with.lines[0]["ids"], nlohmann::json({128000, 9906, 1917}));
  EXPECT_EQ(with.lines[0]["decoded"], "<|begin_of_text|>Hello world");
  EXPECT_EQ(without.lines[0]["ids"], nlohmann::json({9906, 1917}));
}

TEST(TokenizeCli, UnusableTokenizerPathFails) {
  for (const std::string& path :
       {std::string("/nonexistent/tok.gguf"), test::fixtures_dir() + "/smollm2"}) {
    const CliResult r = run_tokenize("--tokenizer " + path, "{\"text\": \"x\"}\n");
    EXPECT_EQ(r.code, 1) << path;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    EXPECT_TRUE(r.lines.empty());
  }
}

}  // namespace
}  // namespace kestrel
