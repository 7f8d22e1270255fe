// `bench serve` datasets with the real tokenizers: random prompts re-encode to exactly their
// length, share their prefix, stay in vLLM's length bounds and follow the seed; ShareGPT files are
// filtered by vLLM's length rules (counts taken from the tokenizer here), shuffled by the seed,
// oversampled to the requested count, and bad files give errors.
#include "bench/serve_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace kestrel::bench {
namespace {

std::string tokenizer_dir(const std::string& name) {
  return test::shared_dir() + "/testdata/tokenizers/" + name;
}

// Use after KESTREL_SKIP_IF_ABSENT(tokenizer_dir(name), ...): the tokenizer is shared test data.
std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto tok = load_tokenizer(tokenizer_dir(name));
  EXPECT_TRUE(tok.ok()) << name << ": " << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// Strict UTF-8 check by code point decoding (no overlongs, surrogates or values past U+10FFFF).
bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80           ? 0
                      : (c >> 5) == 0x6  ? 1
                      : (c >> 4) == 0xE  ? 2
                      : (c >> 3) == 0x1E ? 3
                                         : -1;
    if (extra < 0 || i + extra >= s.size()) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

class ServeDatasetRandom : public testing::TestWithParam<const char*> {};

TEST_P(ServeDatasetRandom, ExactLengthsSharedPrefixAndBounds) {
  KESTREL_SKIP_IF_ABSENT(tokenizer_dir(GetParam()), "the shared tokenizer");
  auto tok = load(GetParam());
  ASSERT_TRUE(tok);
  RandomDatasetSpec spec;
  spec.num_prompts = 50;
  spec.input_len = 64;
  spec.output_len = 128;
  spec.prefix_len = 16;
  spec.range_ratio = 0.5;
  spec.seed = 1234;
  auto got = random_dataset(*local_token_codec(*tok), spec);
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->size(), 50u);

  // vLLM's bounds: the sampled part comes from input_len less the added special tokens.
  const auto specials = static_cast<int64_t>(tok->encode("", true).size());
  const double real = double(64 - specials);
  const int64_t lo = 16 + static_cast<int64_t>(std::floor(real * 0.5));
  const int64_t hi = 16 + static_cast<int64_t>(std::ceil(real * 1.5));
  std::set<int64_t> lengths;
  std::set<std::string> prompts;
  const std::vector<int32_t> prefix((*got)[0].prompt_ids.begin(),
                                    (*got)[0].prompt_ids.begin() + 16);
  for (const SampleRequest& r : *got) {
    const std::vector<int32_t> reencoded = tok->encode(r.prompt, false);
    EXPECT_EQ(static_cast<int64_t>(reencoded.size()), r.prompt_len);
    EXPECT_EQ(reencoded, r.prompt_ids);
    EXPECT_GE(r.prompt_len, lo);
    EXPECT_LE(r.prompt_len, hi);
    EXPECT_GE(r.expected_output_len, 64);
    EXPECT_LE(r.expected_output_len, 192);
    ASSERT_GE(r.prompt_ids.size(), 16u);
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), r.prompt_ids.begin()));
    EXPECT_TRUE(is_valid_utf8(r.prompt));
    for (int32_t id : r.prompt_ids) EXPECT_FALSE(tok->is_special(id)) << id;
    lengths.insert(r.prompt_len);
    prompts.insert(r.prompt);
  }
  EXPECT_GT(lengths.size(), 5u);   // lengths are drawn, not fixed
  EXPECT_EQ(prompts.size(), 50u);  // every prompt is its own

  auto again = random_dataset(*local_token_codec(*tok), spec);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ((*again)[i].prompt, (*got)[i].prompt);
    EXPECT_EQ((*again)[i].expected_output_len, (*got)[i].expected_output_len);
  }
  spec.seed = 1235;
  auto other = random_dataset(*local_token_codec(*tok), spec);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)[0].prompt, (*got)[0].prompt);
}

TEST_P(ServeDatasetRandom, FixedLengthWithoutPrefix) {
  KESTREL_SKIP_IF_ABSENT(tokenizer_dir(GetParam()), "the shared tokenizer");
  auto tok = load(GetParam());
  ASSERT_TRUE(tok);
  RandomDatasetSpec spec;
  spec.num_prompts = 20;
  spec.input_len = 100;
  spec.output_len = 7;
  spec.seed = 5;
  auto got = random_dataset(*local_token_codec(*tok), spec);
  ASSERT_TRUE(got.ok()) << got.error().message;
  const auto want = 100 - static_cast<int64_t>(tok->encode("", true).size());
  for (const SampleRequest& r : *got) {
    EXPECT_EQ(r.prompt_len, want);
    EXPECT_EQ(static_cast<int64_t>(tok->encode(r.prompt, false).size()), want);
    EXPECT_EQ(r.expected_output_len, 7);
  }
}

// The "ServeDataset" prefix keeps these under the --gtest_filter='ServeDataset*' of the suite.
INSTANTIATE_TEST_SUITE_P(ServeDataset, ServeDatasetRandom,
                         testing::Values("qwen3", "llama3_1", "deepseek_v3", "gemma3"),
                         [](const testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

TEST(ServeDataset, RandomRejectsBadSpecs) {
  KESTREL_SKIP_IF_ABSENT(tokenizer_dir("qwen3"), "the shared tokenizer");
  auto tok = load("qwen3");
  ASSERT_TRUE(tok);
  RandomDatasetSpec spec;
  spec.num_prompts = 2;
  spec.input_len = 8;
  spec.range_ratio = 1.0;
  EXPECT_FALSE(random_dataset(*local_token_codec(*tok), spec).ok());
  spec.range_ratio = 0.0;
  spec.num_prompts = 0;
  EXPECT_FALSE(random_dataset(*local_token_codec(*tok), spec).ok());
  spec.num_prompts = 2;
  spec.input_len = 0;  // nothing at all to send
  EXPECT_FALSE(random_dataset(*local_token_codec(*tok), spec).ok());
  spec.prefix_len = 3;  // the prefix alone is a prompt
  auto prefix_only = random_dataset(*local_token_codec(*tok), spec);
  ASSERT_TRUE(prefix_only.ok()) << prefix_only.error().message;
  EXPECT_EQ((*prefix_only)[0].prompt_len, 3);
}

class ServeDatasetShareGpt : public testing::Test {
 protected:
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(tokenizer_dir("qwen3"), "the shared tokenizer");
    tok_ = load("qwen3");
    ASSERT_TRUE(tok_);
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("kestrel_sharegpt_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    return path;
  }
  int64_t count(const std::string& text) const {
    return static_cast<int64_t>(tok_->encode(text, true).size());
  }
  static std::string words(int n) {
    std::string s = "hello";
    for (int i = 1; i < n; ++i) s += " hello";
    return s;
  }
  static nlohmann::json pair(const std::string& human, const std::string& gpt) {
    return {{"conversations",
             {{{"from", "human"}, {"value", human}}, {{"from", "gpt"}, {"value", gpt}}}}};
  }

  std::unique_ptr<Tokenizer> tok_;
  std::filesystem::path dir_;
};

TEST_F(ServeDatasetShareGpt, AppliesVllmFilters) {
  const std::string good1 = "What is the capital of France? Answer briefly.";
  const std::string good1_out = "The capital of France is Paris, a city on the Seine.";
  const std::string good2 = "Write a haiku about autumn leaves falling.";
  const std::string good2_out =
      "Crimson leaves drift down, whispering to the cold ground, summer says goodbye.";
  const std::string long_prompt = words(1100);
  const std::string big_prompt = words(1000);
  const std::string big_out = words(1100);
  // The hand-made cases sit on the intended side of each rule.
  ASSERT_LT(count("Hi"), 4);
  ASSERT_LT(count("Ok"), 4);
  ASSERT_GT(count(long_prompt), 1024);
  ASSERT_LE(count(big_prompt), 1024);
  ASSERT_GT(count(big_prompt) + count(big_out), 2048);
  ASSERT_LE(count(big_prompt) + 10, 2048);
  ASSERT_GE(count(good1), 4);
  ASSERT_GE(count(good2_out), 4);

  nlohmann::json doc = nlohmann::json::array();
  doc.push_back(pair(good1, good1_out));
  doc.push_back(pair("Hi", good1_out));         // prompt too short
  doc.push_back(pair(good2 + " Now!", "Ok"));   // output too short (unless overridden)
  doc.push_back(pair(long_prompt, good1_out));  // prompt too long
  doc.push_back(pair(big_prompt, big_out));     // prompt + output too long (unless overridden)
  doc.push_back({{"conversations", {{{"from", "human"}, {"value", good2}}}}});  // one turn
  doc.push_back({{"id", "no conversations"}});
  doc.push_back(pair(good2, good2_out));
  const std::string path = write("sharegpt.json", doc.dump());

  auto got = sharegpt_dataset(*local_token_codec(*tok_), path, 2, 0, std::nullopt);
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->size(), 2u);
  std::set<std::string> kept;
  for (const SampleRequest& r : *got) {
    kept.insert(r.prompt);
    EXPECT_EQ(r.prompt_len, count(r.prompt));
    EXPECT_EQ(r.prompt_ids, tok_->encode(r.prompt, true));
    EXPECT_EQ(r.expected_output_len, count(r.prompt == good1 ? good1_out : good2_out));
  }
  EXPECT_EQ(kept, (std::set<std::string>{good1, good2}));

  auto overridden = sharegpt_dataset(*local_token_codec(*tok_), path, 10, 0, 10);
  ASSERT_TRUE(overridden.ok()) << overridden.error().message;
  std::set<std::string> kept_overridden;
  for (const SampleRequest& r : *overridden) {
    kept_overridden.insert(r.prompt);
    EXPECT_EQ(r.expected_output_len, 10);
  }
  EXPECT_EQ(kept_overridden, (std::set<std::string>{good1, good2 + " Now!", big_prompt, good2}));
  EXPECT_EQ(overridden->size(), 10u);  // oversampled from the four that pass
}

TEST_F(ServeDatasetShareGpt, ShuffleFollowsTheSeed) {
  nlohmann::json doc = nlohmann::json::array();
  for (int i = 0; i < 12; ++i)
    doc.push_back(pair("Question number " + std::to_string(i) + " about the weather today?",
                       "An answer that is long enough to pass the filter."));
  const std::string path = write("many.json", doc.dump());
  auto order = [&](uint64_t seed) {
    auto got = sharegpt_dataset(*local_token_codec(*tok_), path, 12, seed, std::nullopt);
    EXPECT_TRUE(got.ok());
    std::vector<std::string> prompts;
    if (got.ok())
      for (const SampleRequest& r : *got) prompts.push_back(r.prompt);
    return prompts;
  };
  const std::vector<std::string> a = order(1);
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, order(1));
  EXPECT_NE(a, order(2));
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 12u);  // a permutation
}

TEST_F(ServeDatasetShareGpt, ClearErrors) {
  auto missing = sharegpt_dataset(*local_token_codec(*tok_), (dir_ / "absent.json").string(), 5, 0,
                                  std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("absent.json"), std::string::npos);

  auto malformed = sharegpt_dataset(
      *local_token_codec(*tok_), write("bad.json", "[{\"conversations\": [}"), 5, 0, std::nullopt);
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.error().message.find("JSON"), std::string::npos);

  EXPECT_FALSE(
      sharegpt_dataset(*local_token_codec(*tok_), write("obj.json", "{}"), 5, 0, std::nullopt)
          .ok());
  EXPECT_FALSE(
      sharegpt_dataset(*local_token_codec(*tok_), write("empty.json", "[]"), 5, 0, std::nullopt)
          .ok());
  const std::string no_value =
      R"([{"conversations": [{"from": "human", "text": "x"}, {"from": "gpt", "value": "y"}]}])";
  EXPECT_FALSE(sharegpt_dataset(*local_token_codec(*tok_), write("novalue.json", no_value), 5, 0,
                                std::nullopt)
                   .ok());
}

}  // namespace
}  // namespace kestrel::bench
