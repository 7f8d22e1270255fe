// `kestrel generate` end to end: the real binary on fixtures and the default model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "base/mmap_file.h"
#include "cli/run_kestrel.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using test::CliRun;
using test::run_kestrel;

std::string join(const std::vector<int32_t>& v, const char* sep) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? sep : "") << v[i];
  return s.str();
}

TEST(GenerateCli, GreedyIdsMatchFixtureGolden) {
  const std::string dir = test::fixtures_dir() + "/models/qwen3_f32";
  auto text = read_text_file(dir + "/golden.json");
  ASSERT_TRUE(text.ok()) << text.error().message;
  auto g = nlohmann::json::parse(*text);
  const auto prompt = g["prompts"][1].get<std::vector<int32_t>>();
  const auto want = g["greedy"][1].get<std::vector<int32_t>>();
  // Binding the compute threads to CPUs changes where they run, never what they compute.
  for (const std::string extra : {"", " --pin-threads"}) {
    CliRun r = run_kestrel("generate --model " + dir + " --prompt-ids " + join(prompt, ",") +
                           " --max-tokens " + std::to_string(want.size()) +
                           " --temperature 0 --ignore-eos --print-ids --threads 2" + extra);
    ASSERT_EQ(r.code, 0) << extra << r.err;
    EXPECT_EQ(r.out, join(want, " ") + "\n") << extra;
    EXPECT_NE(r.err.find("prompt: " + std::to_string(prompt.size()) + " tokens"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("decode: " + std::to_string(want.size() - 1) + " tokens"),
              std::string::npos)
        << r.err;
  }
}

TEST(GenerateCli, SeededSamplingIsReproducible) {
  const std::string dir = test::fixtures_dir() + "/models/llama3_f32";
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir << ": committed fixture missing";
  const std::string args = "generate --model " + dir +
                           " --prompt-ids 5,6,7 --max-tokens 12 --temperature 1.0 --top-p 0.9 "
                           "--ignore-eos --print-ids --seed ";
  CliRun a = run_kestrel(args + "11"), b = run_kestrel(args + "11"), c = run_kestrel(args + "12");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST(GenerateCli, BadInputGivesClearErrors) {
  const std::string dir = test::fixtures_dir() + "/models/llama3_f32";
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir << ": committed fixture missing";
  CliRun r = run_kestrel("generate --model " + dir + " --prompt-ids 1,x,3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not an integer"), std::string::npos) << r.err;
  r = run_kestrel("generate --model " + dir + " --prompt-ids 1,999999");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  r = run_kestrel("generate --model " + dir + " --prompt hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--prompt-ids"), std::string::npos) << r.err;
  r = run_kestrel("generate --model /no/such/model --prompt-ids 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = run_kestrel("generate --prompt-ids 1");
  EXPECT_NE(r.code, 0);
  r = run_kestrel("generate --model " + dir + " --prompt-ids 1,2 --max-tokens 100000");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("context length"), std::string::npos) << r.err;
}

TEST(GenerateCli, DefaultModelAnswersATextPrompt) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model");
  CliRun r = run_kestrel(
      "generate --model " + model +
      " --prompt 'The capital of France is' --max-tokens 8 --temperature 0 --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

TEST(GenerateCli, StopStringEndsTheContinuationBeforeIt) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model");
  const std::string base = "generate --model " + model +
                           " --prompt 'The capital of France is' --max-tokens 8 --temperature 0 "
                           "--threads 2";
  CliRun full = run_kestrel(base);
  ASSERT_EQ(full.code, 0) << full.err;
  const size_t at = full.out.find("Paris");
  ASSERT_NE(at, std::string::npos) << full.out;
  CliRun r = run_kestrel(base + " --stop Paris");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, full.out.substr(0, at) + "\n");
  EXPECT_NE(r.err.find("finish: stop"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kestrel
