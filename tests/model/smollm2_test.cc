// Real weights: SmolLM2-135M-Instruct Q4_1 (the default model) against llama.cpp's greedy
// continuations and against transformers' argmax on the dequantized GGUF.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "base/mmap_file.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kBlock = 16;

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::default_model_path();
    if (path.empty()) return;
    LoadOptions o;
    o.model = path;
    o.threads = 2;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    lm_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete lm_;
    lm_ = nullptr;
  }
  void SetUp() override {
    if (!lm_) GTEST_SKIP() << "default model not fetched (scripts/fetch-default-model.sh)";
  }
  static nlohmann::json read(const std::string& name) {
    auto text = read_text_file(test::fixtures_dir() + "/smollm2/" + name);
    EXPECT_TRUE(text.ok()) << name;
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
  }
  static int32_t argmax(const float* row, int64_t n) {
    return int32_t(std::max_element(row, row + n) - row);
  }

  static LoadedModel* lm_;
};
LoadedModel* SmolLM2::lm_ = nullptr;

TEST_F(SmolLM2, ConfigFromGguf) {
  const ModelConfig& c = lm_->config;
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.rope_interleaved);
}

TEST_F(SmolLM2, GreedyMatchesLlamaCppForAtLeast16Tokens) {
  auto j = read("llamacpp_greedy.json");
  ASSERT_FALSE(j.is_null());
  const int64_t V = lm_->config.vocab_size;
  KVCacheStorage kv = lm_->model->make_kv_cache(16, kBlock);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[i] = 15 - i;
  std::vector<float> logits(V);
  for (const auto& p : j.at("prompts")) {
    std::vector<int32_t> seq = p.at("ids").get<std::vector<int32_t>>();
    const auto want = p.at("greedy").get<std::vector<int32_t>>();
    BatchBuilder bb(kBlock);
    bb.add(seq, 0, table, BatchBuilder::Logits::kLast);
    lm_->model->forward(bb.batch(), kv, logits.data());
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(argmax(logits.data(), V));
      seq.push_back(got.back());
      bb.clear();
      bb.add(std::span<const int32_t>(&seq.back(), 1), int32_t(seq.size() - 1), table,
             BatchBuilder::Logits::kLast);
      lm_->model->forward(bb.batch(), kv, logits.data());
    }
    size_t agree = 0;
    while (agree < want.size() && got[agree] == want[agree]) ++agree;
    std::printf("[smollm2] prompt %.30s...: first %zu of %zu tokens equal llama.cpp's\n",
                p.at("text").get<std::string>().c_str(), agree, want.size());
    EXPECT_GE(agree, 16u) << p.at("text").get<std::string>();
  }
}

TEST_F(SmolLM2, ArgmaxAgreesWithTransformersOnDequantizedGguf) {
  auto j = read("hf_argmax.json");
  ASSERT_FALSE(j.is_null());
  const int64_t V = lm_->config.vocab_size;
  KVCacheStorage kv = lm_->model->make_kv_cache(16, kBlock);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[i] = i;
  size_t agree = 0, total = 0;
  for (const auto& s : j.at("sequences")) {
    const auto ids = s.at("ids").get<std::vector<int32_t>>();
    const auto ref = s.at("argmax").get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), ref.size());
    BatchBuilder bb(kBlock);
    bb.add(ids, 0, table, BatchBuilder::Logits::kAll);
    std::vector<float> logits(ids.size() * V);
    lm_->model->forward(bb.batch(), kv, logits.data());
    for (size_t r = 0; r < ids.size(); ++r, ++total) agree += argmax(&logits[r * V], V) == ref[r];
  }
  std::printf("[smollm2] argmax agreement with transformers: %zu / %zu\n", agree, total);
  ASSERT_GT(total, 0u);
  EXPECT_GE(double(agree) / double(total), 0.99);
}

}  // namespace
}  // namespace kestrel
