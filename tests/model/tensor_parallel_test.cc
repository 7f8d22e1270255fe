// Tensor parallelism across real processes (fork, shared-memory all-gathers): GQA models split
// over 2 or 4 ranks (query heads with their KV heads, MLP, hidden and vocabulary features),
// Qwen3-MoE and DeepSeek-V3 (MLA heads, routed and shared experts), Qwen3-Next and Qwen3.5
// (linear-attention key heads with their state), give every rank the
// logits of the unsplit model bit for bit, for prompts batched together, while each rank holds
// only part of the weights; splits that cannot work are refused at load with the reason.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

#include "base/mmap_file.h"
#include "distributed/fork_ranks.h"
#include "distributed/shm_comm.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kBlock = 16;

struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  int64_t rows = 0;
};

Prompts golden_prompts(const std::string& dir) {
  Prompts p;
  auto text = read_text_file(dir + "/golden.json");
  EXPECT_TRUE(text.ok());
  p.ids = nlohmann::json::parse(*text).at("prompts").get<std::vector<std::vector<int32_t>>>();
  for (const auto& ids : p.ids) p.rows += int64_t(ids.size());
  return p;
}

LoadOptions options(const std::string& dir, int rank = 0, int size = 1, DeviceComm* comm = nullptr,
                    const std::string& dtype = "float32") {
  LoadOptions o;
  o.model = dir;
  o.threads = 1;
  o.dtype = dtype;
  o.tp_rank = rank;
  o.tp_size = size;
  o.tp_comm = comm;
  return o;
}

// Every prompt in one batch, logits of every row: [rows, vocab].
std::vector<float> all_logits(CausalLM& model, const Prompts& p) {
  const int64_t V = model.config().vocab_size;
  // Hybrid models: prompt s keeps its recurrent state in slot s.
  KVCacheStorage kv = model.make_kv_cache(64, kBlock, int32_t(p.ids.size()));
  const bool state = model.config().linear.enabled();
  BatchBuilder bb(kBlock);
  std::vector<std::vector<int32_t>> tables;
  int32_t next = 1;
  for (const auto& ids : p.ids) {
    std::vector<int32_t> t;
    for (size_t i = 0; i < ids.size(); i += kBlock) t.push_back(next++);
    tables.push_back(std::move(t));
  }
  for (size_t s = 0; s < p.ids.size(); ++s)
    bb.add(p.ids[s], 0, std::span<const std::vector<int32_t>>(&tables[s], 1), p.ids[s].size(),
           state ? int32_t(s) : -1);
  std::vector<float> logits(size_t(p.rows * V));
  model.forward(bb.batch(), kv, logits.data());
  return logits;
}

// Runs the model of `whole` split over `size` forked ranks: every rank's logits must be the
// unsplit model's, bit for bit, and every rank must hold less than the whole model's weights.
void expect_split_matches(const LoadOptions& whole_options, int size, const Prompts& prompts) {
  auto whole = load_model(whole_options);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  const std::vector<float> want = all_logits(*(*whole)->model, prompts);
  const double whole_bytes = double((*whole)->model->resident_weight_bytes());
  const size_t n = want.size();
  test::SharedFloats got(n * size_t(size) + size_t(size));
  float* held = got.data() + n * size_t(size);  // each rank's share of the whole's bytes
  const std::string name = test::unique_shm_name();
  const auto status = test::run_ranks(size, [&](int rank) {
    ShmCommOptions co;
    co.name = name;
    co.rank = rank;
    co.size = size;
    co.timeout = std::chrono::milliseconds(20000);
    auto comm = ShmComm::connect(co);
    if (!comm.ok()) return 2;
    LoadOptions o = whole_options;
    o.tp_rank = rank;
    o.tp_size = size;
    o.tp_comm = comm->get();
    auto part = load_model(o);
    if (!part.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, part.error().message.c_str());
      return 3;
    }
    const std::vector<float> logits = all_logits(*(*part)->model, prompts);
    if (logits.size() != n) return 4;
    std::memcpy(got.data() + size_t(rank) * n, logits.data(), n * sizeof(float));
    held[rank] = float(double((*part)->model->resident_weight_bytes()) / whole_bytes);
    return 0;
  });
  for (int r = 0; r < size; ++r) ASSERT_EQ(status[size_t(r)], 0) << "rank " << r;
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(std::memcmp(want.data(), got.data() + size_t(r) * n, n * sizeof(float)), 0)
        << "rank " << r << " of " << size << ": logits differ from the unsplit model's";
    // The embedding stays whole on every rank; everything else is split.
    EXPECT_LT(held[r], 1.0f) << "rank " << r << " holds the whole model";
  }
}

class TensorParallelForward : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TensorParallelForward, RanksAgreeAndMatchTheUnsplitModel) {
  const auto [fixture, size] = GetParam();
  const std::string dir = test::fixtures_dir() + "/models/" + fixture;
  auto golden = read_text_file(dir + "/golden.json");
  ASSERT_TRUE(golden.ok());
  const std::string dtype = nlohmann::json::parse(*golden).at("dtype").get<std::string>();
  expect_split_matches(options(dir, 0, 1, nullptr, dtype), size, golden_prompts(dir));
}

// SmolLM2-135M's 9 heads in 3 KV groups over two ranks (6 + 3 heads), Q4_1 weights, int8
// activations (the default path): activations are quantized from the same values as in one
// process, so the int8 sums and the logits are the same too.
TEST(TensorParallel, DefaultModelOnTwoRanks) {
  KESTREL_SKIP_IF_ABSENT(test::default_model_path(), "the default model");
  Prompts prompts;
  prompts.ids = {{1, 504, 3458, 282, 4077, 28, 9010, 30, 42, 1098, 12}, {1, 253, 7555, 314}};
  for (const auto& ids : prompts.ids) prompts.rows += int64_t(ids.size());
  expect_split_matches(options(test::default_model_path(), 0, 1, nullptr, "auto"), 2, prompts);
}

INSTANTIATE_TEST_SUITE_P(DenseFixtures, TensorParallelForward,
                         ::testing::Combine(::testing::Values("llama3_f32", "qwen2_f32",
                                                              "qwen3_f32", "mistral_f32"),
                                            ::testing::Values(2, 4)));
// Every expert split by its features, the router whole on every rank; bf16 rounds where
// transformers rounds, the same on every rank.
INSTANTIATE_TEST_SUITE_P(MoeFixtures, TensorParallelForward,
                         ::testing::Combine(::testing::Values("qwen3_moe_f32", "qwen3_moe_bf16"),
                                            ::testing::Values(2, 4)));
// MLA heads split (their q_b and kv_b rows), the latent path and cache whole on every rank (and
// V3.2's indexer, so every rank picks the same keys); the dense first layer, the routed and the
// shared experts split by features.
INSTANTIATE_TEST_SUITE_P(MlaFixtures, TensorParallelForward,
                         ::testing::Combine(::testing::Values("deepseek_v3_f32", "deepseek_v3_bf16",
                                                              "deepseek_v3_nolora_f32",
                                                              "deepseek_v32_f32"),
                                            ::testing::Values(2, 4)));

// Hybrid models: each rank holds whole linear-attention key heads with their value heads (their
// projections' rows, conv channels, decays and recurrent state) and gathers the heads' outputs
// before out_proj; the gated attention, MoE and gated shared expert split as above. Two key
// heads per layer: two ranks.
INSTANTIATE_TEST_SUITE_P(HybridFixtures, TensorParallelForward,
                         ::testing::Combine(::testing::Values("qwen3_next_f32", "qwen3_next_bf16",
                                                              "qwen3_5_f32", "qwen3_5_bf16",
                                                              "qwen3_5_moe_f32"),
                                            ::testing::Values(2)));

// Expert parallelism: each rank holds whole experts (a contiguous range) and the ranks gather
// their experts' rows before the combine: still the unsplit model's bits.
class ExpertParallelForward : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ExpertParallelForward, RanksAgreeAndMatchTheUnsplitModel) {
  const auto [fixture, size] = GetParam();
  const std::string dir = test::fixtures_dir() + "/models/" + fixture;
  LoadOptions o = options(dir);
  o.expert_parallel = true;
  expect_split_matches(o, size, golden_prompts(dir));
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, ExpertParallelForward,
                         ::testing::Combine(::testing::Values("qwen3_moe_f32", "deepseek_v3_f32",
                                                              "deepseek_v32_bf16"),
                                            ::testing::Values(2, 4)));
INSTANTIATE_TEST_SUITE_P(HybridFixtures, ExpertParallelForward,
                         ::testing::Combine(::testing::Values("qwen3_5_moe_f32", "qwen3_next_f32"),
                                            ::testing::Values(2)));

// Refusals come before any collective, so a group that never communicates will do.
class UnusedComm final : public DeviceComm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  Status all_reduce_sum(float*, size_t) override { return make_error("unused"); }
  Status reduce_scatter_sum(const float*, size_t, float*) override { return make_error("unused"); }
  Status all_gather(const float*, size_t, float*) override { return make_error("unused"); }
  Status all_gather_bytes(const void*, size_t, void*) override { return make_error("unused"); }
  Status all_to_all_v(const void*, std::span<const size_t>, void*,
                      std::span<const size_t>) override {
    return make_error("unused");
  }
  Status barrier() override { return make_error("unused"); }
};

TEST(TensorParallel, SplitsThatCannotWorkAreRefusedAtLoad) {
  UnusedComm comm;
  // The FP8 checkpoint's two heads per rank are 96 rows of q_b: not whole 128-row scale blocks.
  auto fp8 = load_model(options(test::fixtures_dir() + "/models/deepseek_v3_fp8", 0, 2, &comm));
  ASSERT_FALSE(fp8.ok());
  EXPECT_NE(fp8.error().message.find("do not fall on the 128-row FP8 scale blocks"),
            std::string::npos)
      << fp8.error().message;
  auto no_comm = load_model(options(test::fixtures_dir() + "/models/llama3_f32", 0, 2, nullptr));
  ASSERT_FALSE(no_comm.ok());
  EXPECT_NE(no_comm.error().message.find("has no communicator"), std::string::npos);
  // Three KV heads' worth of replication does not divide: refused by the plan.
  auto uneven = load_model(options(test::fixtures_dir() + "/models/llama3_f32", 0, 3, &comm));
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.error().message.find("cannot be replicated evenly"), std::string::npos)
      << uneven.error().message;
  // Two linear-attention key heads cannot go to four ranks.
  auto heads = load_model(options(test::fixtures_dir() + "/models/qwen3_5_f32", 0, 4, &comm));
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.error().message.find("linear-attention layers have only 2 key heads"),
            std::string::npos)
      << heads.error().message;
}

}  // namespace
}  // namespace kestrel
