// The default model (SmolLM2-135M Q4_1, Q8_0 head) and a model of every other GGUF format compute
// the same logits, bit for bit, under every ISA this machine runs (cap_cpu_isa: scalar, AVX2,
// AVX-VNNI, AVX-512 with its packed GEMMs): every prompt position of a batched prefill and every
// step of a 64-token greedy decode. The weights' kernels follow one arithmetic per format
// (backend/cpu/q8_block_dot.h, kquant_dot.h, fp8_matmul.h, float_panels.h), and so do the other
// ops.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/mmap_file.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "prompt_logits.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kSteps = 64;

uint64_t fnv1a(const float* v, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const uint8_t*>(v);
  for (size_t i = 0; i < size_t(n) * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// What one ISA computed: per prompt, a hash of every prefill position's logits and of each
// decode step's, and the greedy tokens.
struct IsaRun {
  std::vector<uint64_t> hashes;
  std::vector<int32_t> tokens;
};

IsaRun run_under(const std::string& isa, LoadOptions o,
                 const std::vector<std::vector<int32_t>>& prompts) {
  EXPECT_TRUE(cap_cpu_isa(isa).ok());
  o.threads = 2;
  auto lm = load_model(o);
  EXPECT_TRUE(lm.ok()) << (lm.ok() ? "" : lm.error().message);
  IsaRun out;
  if (!lm.ok()) return out;
  const int64_t V = (*lm)->config.vocab_size;
  for (std::vector<int32_t> seq : prompts) {
    OneSequenceCache cache(*(*lm)->model, 16);  // fresh: every prompt starts a new sequence
    BatchBuilder bb = cache.builder();
    cache.add(bb, seq, 0, seq.size());
    std::vector<float> logits(seq.size() * size_t(V));
    (*lm)->model->forward(bb.batch(), cache.kv, logits.data());
    for (size_t r = 0; r < seq.size(); ++r) out.hashes.push_back(fnv1a(&logits[r * V], V));
    const float* last = &logits[(seq.size() - 1) * V];
    for (int step = 0; step < kSteps; ++step) {
      const auto next = int32_t(std::max_element(last, last + V) - last);
      out.tokens.push_back(next);
      seq.push_back(next);
      bb.clear();
      cache.add(bb, std::span<const int32_t>(&seq.back(), 1), int32_t(seq.size() - 1), 1);
      (*lm)->model->forward(bb.batch(), cache.kv, logits.data());
      out.hashes.push_back(fnv1a(logits.data(), V));
      last = logits.data();
    }
  }
  return out;
}

// The ISAs this machine runs, widest first.
std::vector<std::string> machine_isas() {
  std::vector<std::string> isas;
  for (const char* isa : {"avx512", "avxvnni", "avx2", "scalar"}) {
    EXPECT_TRUE(cap_cpu_isa(isa).ok());
    if (make_cpu_backend(1)->name().find(std::string(", ") + isa + ",") != std::string::npos)
      isas.push_back(isa);
  }
  EXPECT_TRUE(cap_cpu_isa("auto").ok());
  return isas;
}

// Every ISA gives the first one's logits bits and greedy tokens for `model` on `prompts`.
void expect_same_on_every_isa(const std::string& model,
                              const std::vector<std::vector<int32_t>>& prompts,
                              LoadOptions o = LoadOptions()) {
  o.model = model;
  const std::vector<std::string> isas = machine_isas();
  ASSERT_GE(isas.size(), 2u) << "every x86-64-v3 machine runs scalar and AVX2";
  const IsaRun first = run_under(isas[0], o, prompts);
  ASSERT_EQ(first.tokens.size(), prompts.size() * kSteps);
  for (size_t i = 1; i < isas.size(); ++i) {
    SCOPED_TRACE(isas[i] + " against " + isas[0]);
    const IsaRun other = run_under(isas[i], o, prompts);
    EXPECT_EQ(other.tokens, first.tokens);
    ASSERT_EQ(other.hashes.size(), first.hashes.size());
    size_t differ = 0, first_differ = other.hashes.size();
    for (size_t h = 0; h < other.hashes.size(); ++h)
      if (other.hashes[h] != first.hashes[h] && differ++ == 0) first_differ = h;
    EXPECT_EQ(differ, 0u) << "logits rows differ, the first at row " << first_differ << " of "
                          << other.hashes.size();
  }
  ASSERT_TRUE(cap_cpu_isa("auto").ok());
}

TEST(DefaultModelOnEveryIsa, SameLogitsBitsAndGreedyTokens) {
  KESTREL_SKIP_IF_ABSENT(test::default_model_path(),
                         "the default model (scripts/fetch-default-model.sh)");
  auto text = read_text_file(test::fixtures_dir() + "/smollm2/llamacpp_greedy.json");
  ASSERT_TRUE(text.ok());
  const nlohmann::json fixture = nlohmann::json::parse(*text);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : fixture.at("prompts"))
    prompts.push_back(p.at("ids").get<std::vector<int32_t>>());
  ASSERT_GE(prompts.size(), 4u);
  expect_same_on_every_isa(test::default_model_path(), prompts);
}

// Every GGUF format with int8 activations in one model (tools/make_gguf_fixture.py): Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0 (q8_block_dot.h) and Q4_K, Q5_K, Q6_K (kquant_dot.h), embeddings and head
// included, over prompts that fill several activation tiles and a 64-token greedy decode.
std::vector<std::vector<int32_t>> fixture_prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {1, 7, 19, 40}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(int32_t(4 + (i * 37 + len * 11) % 250));
    prompts.push_back(p);
  }
  return prompts;
}

std::string quants_fixture() {
  return test::fixtures_dir() + "/gguf/tiny_llama_quants.gguf";
}

TEST(GgufQuantsOnEveryIsa, SameLogitsBitsAndGreedyTokens) {
  expect_same_on_every_isa(quants_fixture(), fixture_prompts());
}

// The KV cache formats: their quantizers and the attention kernels that read them (int8, which
// needs a checkpoint's scales, through the qwen3_w8a8c8 fixture below).
class KvCacheOnEveryIsa : public testing::TestWithParam<const char*> {};

TEST_P(KvCacheOnEveryIsa, SameLogitsBitsAndGreedyTokens) {
  LoadOptions o;
  o.kv_cache_dtype = GetParam();
  expect_same_on_every_isa(quants_fixture(), fixture_prompts(), o);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvCacheOnEveryIsa,
                         testing::Values("float32", "bfloat16", "fp8", "fp8_e5m2", "mxfp8"),
                         [](const auto& info) { return std::string(info.param); });

// Fixtures of the other formats the guarantee covers: float weights (f32 and bf16 activations,
// dense, MoE, MLA, hybrid linear attention, Gemma's gating and soft-capping), I8 and FP8.
class FixtureOnEveryIsa : public testing::TestWithParam<const char*> {};

TEST_P(FixtureOnEveryIsa, SameLogitsBits) {
  const std::vector<int32_t> prompt = {5, 17, 42, 7, 99, 3, 64, 12, 8, 31, 77, 2, 15, 40, 9, 21};
  std::vector<float> first;
  std::string first_isa;
  for (const char* isa : {"avx512", "avxvnni", "avx2", "scalar"}) {
    ASSERT_TRUE(cap_cpu_isa(isa).ok());
    if (make_cpu_backend(1)->name().find(std::string(", ") + isa + ",") == std::string::npos)
      continue;
    const std::vector<float> logits = prompt_logits(fixture(GetParam()), prompt);
    ASSERT_FALSE(logits.empty());
    if (first.empty()) {
      first = logits;
      first_isa = isa;
      continue;
    }
    size_t differ = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      differ += std::memcmp(&logits[i], &first[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << isa << " against " << first_isa << " (" << logits.size() << " logits)";
  }
  ASSERT_TRUE(cap_cpu_isa("auto").ok());
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureOnEveryIsa,
                         testing::Values("llama3_f32", "llama3_bf16", "qwen3_moe_bf16",
                                         "qwen3_w8a8_dynamic", "deepseek_v3_bf16",
                                         "deepseek_v3_fp8", "qwen3_w8a8c8", "qwen3_5_bf16",
                                         "qwen3_5_moe_bf16", "qwen3_next_bf16", "gemma3_bf16"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kestrel
