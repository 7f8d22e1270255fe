// Real weights: Gemma3-270M Q4_K_M (scripts/fetch-gemma3.sh) against llama.cpp's greedy
// continuations of the same file (tools/make_gemma3_goldens.py), by the SmolLM2 test's method:
// the sequences may part only where llama.cpp's own top-2 margin is a near-tie.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/mmap_file.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kBlock = 16;
constexpr int kBlocks = 64;  // the longest prompt (past the 512-token window) and its greedy tail
// llama.cpp's batched and one-at-a-time logits of the same sequence differ by this much (as on
// SmolLM2), so below it its greedy choice is not the model's.
constexpr double kLlamaCppNoise = 0.5;

class Gemma3Gguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::gemma3_model_path();
    if (!std::filesystem::exists(path)) return;  // SetUp skips or fails
    LoadOptions o;
    o.model = path;
    o.threads = 2;
    auto m = load_model(o);
    EXPECT_TRUE(m.ok()) << m.error().message;
    if (m.ok()) lm_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete lm_;
    lm_ = nullptr;
  }
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(test::gemma3_model_path(), "Gemma3-270M (scripts/fetch-gemma3.sh)");
    ASSERT_TRUE(lm_) << "Gemma3-270M is present but did not load";
  }
  static nlohmann::json golden() {
    auto text = read_text_file(test::fixtures_dir() + "/gemma3_270m/llamacpp_greedy.json");
    EXPECT_TRUE(text.ok());
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
  }
  static int32_t argmax(const float* row, int64_t n) {
    return int32_t(std::max_element(row, row + n) - row);
  }

  static LoadedModel* lm_;
};
LoadedModel* Gemma3Gguf::lm_ = nullptr;

TEST_F(Gemma3Gguf, ConfigFromGguf) {
  const ModelConfig& c = lm_->config;
  EXPECT_EQ(c.architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(c.hidden_size, 640);
  EXPECT_EQ(c.num_hidden_layers, 18);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_local_theta, 1e4);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.rope_interleaved);
  // Five sliding layers of 512 tokens, then a global one.
  ASSERT_EQ(c.layer_sliding_window.size(), 18u);
  for (int64_t l = 0; l < 18; ++l) EXPECT_EQ(c.sliding_window(l), (l + 1) % 6 ? 512 : 0) << l;
}

TEST_F(Gemma3Gguf, GreedyMatchesLlamaCppUpToItsNearTies) {
  const nlohmann::json j = golden();
  ASSERT_FALSE(j.is_null());
  const int64_t V = lm_->config.vocab_size;
  // One KV cache group per layer kind; group g's blocks are g·kBlocks + the table's, reversed.
  const size_t G = lm_->model->kv_cache_layout(kBlock).groups.size();
  KVCacheStorage kv = lm_->model->make_kv_cache(int64_t(kBlocks) * int64_t(G), kBlock);
  std::vector<std::vector<int32_t>> tables(G, std::vector<int32_t>(kBlocks));
  for (size_t g = 0; g < G; ++g)
    for (int i = 0; i < kBlocks; ++i) tables[g][size_t(i)] = int32_t(g) * kBlocks + kBlocks - 1 - i;
  std::vector<float> logits(V);
  size_t index = 0, longest = 0;
  for (const auto& p : j.at("prompts")) {
    const auto margin = p.at("margins").get<std::vector<double>>();
    std::vector<int32_t> seq = p.at("ids").get<std::vector<int32_t>>();
    const auto want = p.at("greedy").get<std::vector<int32_t>>();
    ASSERT_LE(seq.size() + want.size(), size_t(kBlocks * kBlock));
    longest = std::max(longest, seq.size());
    BatchBuilder bb(kBlock, int(G));
    bb.add(seq, 0, tables, 1);
    lm_->model->forward(bb.batch(), kv, logits.data());
    size_t agree = 0;
    while (agree < want.size() && argmax(logits.data(), V) == want[agree]) {
      seq.push_back(want[agree++]);
      bb.clear();
      bb.add(std::span<const int32_t>(&seq.back(), 1), int32_t(seq.size() - 1), tables, 1);
      lm_->model->forward(bb.batch(), kv, logits.data());
    }
    std::printf(
        "[gemma3] prompt %zu (%zu ids): first %zu of %zu greedy tokens equal llama.cpp's%s\n",
        index, p.at("ids").size(), agree, want.size(),
        agree < want.size()
            ? fmt::format(" (then llama.cpp's margin {:.4f})", margin[agree]).c_str()
            : "");
    if (agree < want.size()) {
      EXPECT_LT(margin[agree], kLlamaCppNoise)
          << "prompt " << index << " diverged at step " << agree << " where llama.cpp was decisive";
    }
    ++index;
  }
  EXPECT_GT(longest, 512u) << "no prompt reaches past the sliding window";
}

}  // namespace
}  // namespace kestrel
