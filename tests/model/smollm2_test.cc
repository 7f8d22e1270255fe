// Real weights: SmolLM2-135M-Instruct Q4_1 (the default model) against llama.cpp's greedy
// continuations and against transformers' argmax on the dequantized GGUF.
//
// llama.cpp's own logits on this model move by 0.3–1.5 between its batched and token-by-token
// evaluation of the same sequence (measured with llama-cpp-python 0.3.36, n_batch 512 vs 1), so
// where its top-2 margin is below kLlamaCppNoise its greedy choice is not determined by the model.
// The greedy comparison therefore runs until the sequences part, which may only happen at such a
// near-tie (margins.json records llama.cpp's margin at every step).
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
constexpr double kLlamaCppNoise = 0.5;

class SmolLM2 : public ::testing::Test {
 protected:
  static LoadedModel* load(const std::string& quant_compute) {
    const std::string path = test::default_model_path();
    if (!std::filesystem::exists(path)) return nullptr;  // SetUp skips or fails
    LoadOptions o;
    o.model = path;
    o.threads = 2;
    o.quant_compute = quant_compute;
    auto m = load_model(o);
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(*m).release() : nullptr;
  }
  static void SetUpTestSuite() { lm_ = load("int8"); }
  static void TearDownTestSuite() {
    delete lm_;
    lm_ = nullptr;
  }
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(test::default_model_path(),
                           "the default model (scripts/fetch-default-model.sh)");
    ASSERT_TRUE(lm_) << "the default model is present but did not load";
  }
  static nlohmann::json read(const std::string& name) {
    auto text = read_text_file(test::fixtures_dir() + "/smollm2/" + name);
    EXPECT_TRUE(text.ok()) << name;
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
  }

 public:
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

TEST_F(SmolLM2, GreedyMatchesLlamaCppUpToItsNearTies) {
  auto j = read("llamacpp_greedy.json");
  auto margins = read("margins.json").at("llamacpp_greedy");
  ASSERT_FALSE(j.is_null());
  const int64_t V = lm_->config.vocab_size;
  KVCacheStorage kv = lm_->model->make_kv_cache(16, kBlock);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[i] = 15 - i;
  std::vector<float> logits(V);
  size_t prompt_index = 0;
  for (const auto& p : j.at("prompts")) {
    const auto margin = margins.at(prompt_index++).get<std::vector<double>>();
    std::vector<int32_t> seq = p.at("ids").get<std::vector<int32_t>>();
    const auto want = p.at("greedy").get<std::vector<int32_t>>();
    BatchBuilder bb(kBlock);
    bb.add(seq, 0, table, BatchBuilder::Logits::kLast);
    lm_->model->forward(bb.batch(), kv, logits.data());
    size_t agree = 0;
    while (agree < want.size() && argmax(logits.data(), V) == want[agree]) {
      seq.push_back(want[agree++]);
      bb.clear();
      bb.add(std::span<const int32_t>(&seq.back(), 1), int32_t(seq.size() - 1), table,
             BatchBuilder::Logits::kLast);
      lm_->model->forward(bb.batch(), kv, logits.data());
    }
    std::printf("[smollm2] prompt %zu: first %zu of %zu greedy tokens equal llama.cpp's%s\n",
                prompt_index - 1, agree, want.size(),
                agree < want.size()
                    ? fmt::format(" (then llama.cpp's margin {:.4f})", margin[agree]).c_str()
                    : "");
    if (agree < want.size()) {
      EXPECT_LT(margin[agree], kLlamaCppNoise)
          << "diverged at step " << agree
          << " where llama.cpp was decisive: " << p.at("text").get<std::string>();
    }
  }
}

// Share of positions where Kestrel's argmax equals transformers' (teacher-forced sequences).
double transformers_agreement(LoadedModel& lm, const nlohmann::json& j) {
  const int64_t V = lm.config.vocab_size;
  KVCacheStorage kv = lm.model->make_kv_cache(16, kBlock);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[i] = i;
  size_t agree = 0, total = 0;
  for (const auto& s : j.at("sequences")) {
    const auto ids = s.at("ids").get<std::vector<int32_t>>();
    const auto ref = s.at("argmax").get<std::vector<int32_t>>();
    EXPECT_EQ(ids.size(), ref.size());
    BatchBuilder bb(kBlock);
    bb.add(ids, 0, table, BatchBuilder::Logits::kAll);
    std::vector<float> logits(ids.size() * V);
    lm.model->forward(bb.batch(), kv, logits.data());
    for (size_t r = 0; r < ids.size() && r < ref.size(); ++r, ++total)
      agree += SmolLM2::argmax(&logits[r * V], V) == ref[r];
  }
  std::printf("[smollm2] argmax agreement with transformers (%s): %zu / %zu\n",
              lm.backend->name().c_str(), agree, total);
  return total ? double(agree) / double(total) : 0.0;
}

// transformers multiplies the dequantized weights with f32 activations: Kestrel's f32
// quantized-matmul mode computes the same thing.
TEST_F(SmolLM2, ArgmaxAgreesWithTransformersInF32Mode) {
  std::unique_ptr<LoadedModel> f32(load("f32"));
  ASSERT_TRUE(f32);
  EXPECT_GE(transformers_agreement(*f32, read("hf_argmax.json")), 0.99);
}

// The default int8 mode quantizes activations per block as llama.cpp does; its flips against
// transformers are at near-ties (llama.cpp itself agrees with transformers on 125 of 128
// next tokens of these prompts).
TEST_F(SmolLM2, ArgmaxMostlyAgreesWithTransformersInInt8Mode) {
  EXPECT_GE(transformers_agreement(*lm_, read("hf_argmax.json")), 0.95);
}

}  // namespace
}  // namespace kestrel
