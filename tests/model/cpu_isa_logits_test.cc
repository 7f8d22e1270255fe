// The default model (SmolLM2-135M Q4_1, Q8_0 head) computes the same logits, bit for bit, under
// every ISA this machine runs (cap_cpu_isa: scalar, AVX2, AVX-512 with its packed GEMMs): every
// prompt position of a batched prefill and every step of a 64-token greedy decode. The weights'
// kernels follow one arithmetic per format (backend/cpu/q8_block_dot.h), and so do the other ops.
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

constexpr int kBlock = 16;
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

IsaRun run_under(const std::string& isa, const std::vector<std::vector<int32_t>>& prompts) {
  EXPECT_TRUE(cap_cpu_isa(isa).ok());
  LoadOptions o;
  o.model = test::default_model_path();
  o.threads = 2;
  auto lm = load_model(o);
  EXPECT_TRUE(lm.ok()) << (lm.ok() ? "" : lm.error().message);
  IsaRun out;
  if (!lm.ok()) return out;
  const int64_t V = (*lm)->config.vocab_size;
  KVCacheStorage kv = (*lm)->model->make_kv_cache(16, kBlock);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[size_t(i)] = i;
  for (std::vector<int32_t> seq : prompts) {
    BatchBuilder bb(kBlock);
    bb.add(seq, 0, table, BatchBuilder::Logits::kAll);
    std::vector<float> logits(seq.size() * size_t(V));
    (*lm)->model->forward(bb.batch(), kv, logits.data());
    for (size_t r = 0; r < seq.size(); ++r) out.hashes.push_back(fnv1a(&logits[r * V], V));
    const float* last = &logits[(seq.size() - 1) * V];
    for (int step = 0; step < kSteps; ++step) {
      const auto next = int32_t(std::max_element(last, last + V) - last);
      out.tokens.push_back(next);
      seq.push_back(next);
      bb.clear();
      bb.add(std::span<const int32_t>(&seq.back(), 1), int32_t(seq.size() - 1), table,
             BatchBuilder::Logits::kLast);
      (*lm)->model->forward(bb.batch(), kv, logits.data());
      out.hashes.push_back(fnv1a(logits.data(), V));
      last = logits.data();
    }
  }
  return out;
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

  std::vector<std::string> isas;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    ASSERT_TRUE(cap_cpu_isa(isa).ok());
    if (make_cpu_backend(1)->name().find(std::string(", ") + isa + ",") != std::string::npos)
      isas.push_back(isa);
  }
  ASSERT_TRUE(cap_cpu_isa("auto").ok());
  ASSERT_GE(isas.size(), 2u) << "every x86-64-v3 machine runs scalar and AVX2";

  const IsaRun first = run_under(isas[0], prompts);
  ASSERT_EQ(first.tokens.size(), prompts.size() * kSteps);
  for (size_t i = 1; i < isas.size(); ++i) {
    SCOPED_TRACE(isas[i] + " against " + isas[0]);
    const IsaRun other = run_under(isas[i], prompts);
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

// Fixtures of the other formats the guarantee covers: float weights (f32 and bf16 activations,
// dense, MoE, hybrid linear attention, Gemma's gating and soft-capping) and I8.
class FixtureOnEveryIsa : public testing::TestWithParam<const char*> {};

TEST_P(FixtureOnEveryIsa, SameLogitsBits) {
  const std::vector<int32_t> prompt = {5, 17, 42, 7, 99, 3, 64, 12, 8, 31, 77, 2, 15, 40, 9, 21};
  std::vector<float> first;
  std::string first_isa;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
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
                                         "qwen3_w8a8_dynamic", "deepseek_v3_bf16"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kestrel
