// The default model's GGUF tokenizer against ids from transformers
// (tools/make_tokenizer_goldens.py → tests/fixtures/smollm2/tokenize_golden.json).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

struct Golden {
  bool add_bos = false;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::vector<Case> cases;
  std::vector<Case> lossy_cases;  // contain bytes the vocabulary has no token for
};

Golden load_golden() {
  std::ifstream in(test::fixtures_dir() + "/smollm2/tokenize_golden.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  Golden g;
  g.add_bos = j.at("add_bos").get<bool>();
  g.bos_id = j.at("bos_id").get<int32_t>();
  g.eos_id = j.at("eos_id").get<int32_t>();
  for (const auto& c : j.at("cases")) {
    g.cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>()});
  }
  for (const auto& c : j.at("lossy_cases")) {
    g.lossy_cases.push_back(
        {c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>()});
  }
  return g;
}

class GgufBpe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::default_model_path();
    if (!std::filesystem::exists(path)) return;  // SetUp skips or fails
    auto gguf = GgufFile::open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.error().message;
    auto tok = load_gguf_tokenizer(**gguf);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tokenizer_ = std::move(tok).value().release();
    golden_ = new Golden(load_golden());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete golden_;
    tokenizer_ = nullptr;
    golden_ = nullptr;
  }
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(test::default_model_path(),
                           "the default model (scripts/fetch-default-model.sh)");
    ASSERT_NE(tokenizer_, nullptr) << "the default model is present but its tokenizer did not load";
    ASSERT_FALSE(golden_->cases.empty());
  }

  static const Tokenizer* tokenizer_;
  static const Golden* golden_;
};

const Tokenizer* GgufBpe::tokenizer_ = nullptr;
const Golden* GgufBpe::golden_ = nullptr;

TEST_F(GgufBpe, EncodesLikeTransformers) {
  for (const Case& c : golden_->cases) {
    EXPECT_EQ(tokenizer_->encode(c.text, false), c.ids) << "text: " << c.text;
  }
}

TEST_F(GgufBpe, DropsBytesWithoutTokensLikeTransformers) {
  ASSERT_FALSE(golden_->lossy_cases.empty());
  for (const Case& c : golden_->lossy_cases) {
    EXPECT_EQ(tokenizer_->encode(c.text, false), c.ids) << "text: " << c.text;
  }
}

TEST_F(GgufBpe, DecodeAndTokenBytesRoundTrip) {
  for (const Case& c : golden_->cases) {
    EXPECT_EQ(tokenizer_->decode(c.ids, false), c.text);
    std::string joined;
    for (int32_t id : c.ids) joined += tokenizer_->token_bytes(id);
    EXPECT_EQ(joined, c.text);
  }
}

TEST_F(GgufBpe, AddsBosOnlyWhenTheModelAsks) {
  const std::vector<int32_t> plain = tokenizer_->encode("Hello world", false);
  std::vector<int32_t> expected = plain;
  if (golden_->add_bos) expected.insert(expected.begin(), golden_->bos_id);
  EXPECT_EQ(tokenizer_->encode("Hello world", true), expected);
  EXPECT_EQ(tokenizer_->bos_id(), golden_->bos_id);
  ASSERT_FALSE(tokenizer_->eos_ids().empty());
  EXPECT_EQ(tokenizer_->eos_ids().front(), golden_->eos_id);
  EXPECT_EQ(tokenizer_->vocab_size(), 49152);
}

TEST_F(GgufBpe, ChatMarkersAreSingleSpecialTokens) {
  const std::vector<int32_t> start = tokenizer_->encode("<|im_start|>", false);
  const std::vector<int32_t> end = tokenizer_->encode("<|im_end|>", false);
  ASSERT_EQ(start.size(), 1u);
  ASSERT_EQ(end.size(), 1u);
  EXPECT_TRUE(tokenizer_->is_special(start[0]));
  EXPECT_TRUE(tokenizer_->is_special(end[0]));
  EXPECT_EQ(tokenizer_->token_bytes(start[0]), "<|im_start|>");
  for (int32_t id : tokenizer_->encode("plain words", false)) {
    EXPECT_FALSE(tokenizer_->is_special(id));
  }
}

TEST_F(GgufBpe, SkippingSpecialTokensDropsThemFromDecode) {
  int checked = 0;
  for (const Case& c : golden_->cases) {
    std::string expected = c.text;
    for (const std::string marker : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>",
                                     "<file_sep>", "<filename>"}) {
      for (size_t at; (at = expected.find(marker)) != std::string::npos;) {
        expected.erase(at, marker.size());
      }
    }
    checked += expected != c.text;
    EXPECT_EQ(tokenizer_->decode(c.ids, true), expected);
  }
  EXPECT_GE(checked, 3);  // the golden set does contain special tokens
}

}  // namespace
}  // namespace kestrel
