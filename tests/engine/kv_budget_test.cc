// KV pool sizing: which rule decides, the arithmetic of each, the refusal when one max-length
// request would not fit, and vLLM's byte-count syntax.
#include "engine/kv_budget.h"

#include <gtest/gtest.h>

namespace kestrel {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

KVBudgetRequest request() {
  KVBudgetRequest r;
  KVCacheSpec layer;
  layer.block_size = 16;
  layer.num_kv_heads = 3;
  layer.head_dim = 64;
  layer.row_bytes = 128;  // 2 planes × 30 × 16 × 3 × 128 = 368,640 bytes per block
  r.layout = uniform_kv_cache_layout(layer, 30);
  r.max_num_batched_tokens = 2048;
  r.weight_bytes = 100 << 20;
  r.activation_reserve_bytes = 50 << 20;
  r.max_model_len = 8192;
  return r;
}

MemoryInfo ram(int64_t gib) {
  return MemoryInfo{gib * kGiB, gib * kGiB};
}

TEST(KVBudget, ExplicitBytesWin) {
  KVBudgetRequest r = request();
  r.kv_cache_memory_bytes = 1 * kGiB;
  auto b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->num_blocks, kGiB / 368640);
  EXPECT_EQ(b->bytes, b->num_blocks * 368640);
  EXPECT_EQ(b->num_tokens, (b->num_blocks - 1) * 16);
  EXPECT_EQ(b->source, "--kv-cache-memory");
}

TEST(KVBudget, ExplicitUtilizationTakesThatShareOfRamMinusWeightsAndActivations) {
  KVBudgetRequest r = request();
  r.memory_utilization = 0.5;
  auto b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  const int64_t budget = 12 * kGiB - (100 << 20) - (50 << 20);
  EXPECT_EQ(b->num_blocks, budget / 368640);
}

TEST(KVBudget, DefaultIsCappedAtFourGiB) {
  auto big = plan_kv_cache(request(), ram(64));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->num_blocks, kDefaultCpuKvCacheBytes / 368640);
  // On a small machine the 0.9 × RAM rule is below the cap and decides.
  auto small = plan_kv_cache(request(), ram(2));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->num_blocks,
            (int64_t(0.9 * double(2 * kGiB)) - (100 << 20) - (50 << 20)) / 368640);
}

TEST(KVBudget, RefusesWhenOneMaxLengthRequestDoesNotFit) {
  KVBudgetRequest r = request();
  r.kv_cache_memory_bytes = 512 * 368640;  // 511 usable blocks < 8192 / 16 = 512 needed
  auto b = plan_kv_cache(r, ram(24));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("max seq len (8192)"), std::string::npos) << b.error().message;
  EXPECT_NE(b.error().message.find("--max-model-len"), std::string::npos);
  r.kv_cache_memory_bytes = 513 * 368640;
  EXPECT_TRUE(plan_kv_cache(r, ram(24)).ok());
  // Weights that eat the whole share leave nothing.
  KVBudgetRequest heavy = request();
  heavy.memory_utilization = 0.1;
  heavy.weight_bytes = 4 * kGiB;
  EXPECT_FALSE(plan_kv_cache(heavy, ram(24)).ok());
}

// Half the layers with a 512-token window: blocks are per group of 15 layers (184,320 bytes),
// and one max-length request needs 512 full-attention blocks plus, for the window, its 511 keys
// and a step of 2048 tokens: (511 + 2048 + 15) / 16 + 1 = 161 blocks.
TEST(KVBudget, SlidingWindowLayersNeedOnlyTheirWindow) {
  KVBudgetRequest r = request();
  std::vector<KVCacheSpec> layers(30);
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i].block_size = 16;
    layers[i].num_kv_heads = 3;
    layers[i].head_dim = 64;
    layers[i].row_bytes = 128;
    if (i % 2 == 1) {
      layers[i].kind = KVCacheKind::kSlidingWindow;
      layers[i].sliding_window = 512;
    }
  }
  auto layout = plan_kv_cache_layout(layers);
  ASSERT_TRUE(layout.ok()) << layout.error().message;
  ASSERT_EQ(layout->groups.size(), 2u);
  r.layout = *layout;
  r.kv_cache_memory_bytes = (512 + 161) * 184320;  // + the null block: one short
  EXPECT_FALSE(plan_kv_cache(r, ram(24)).ok());
  r.kv_cache_memory_bytes = (512 + 161 + 1) * 184320;
  auto b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->num_blocks, 674);
}

TEST(KVBudget, LinearAttentionStateSlotsArePricedFirst) {
  KVBudgetRequest r = request();
  r.kv_cache_memory_bytes = 1 * kGiB;
  r.layout.state = RecurrentStateLayout{3, int64_t{1} << 20};  // 12 MiB per slot
  r.max_num_seqs = 8;
  r.state_checkpoints = true;
  auto b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->num_state_slots, 8);
  EXPECT_EQ(b->num_state_checkpoints, 8);
  EXPECT_EQ(b->state_bytes, 16 * 12 * (int64_t{1} << 20));
  EXPECT_EQ(b->num_blocks, (kGiB - b->state_bytes) / 368640);
  // Without prefix caching no checkpoints; with 64 sequences the slots would take over half the
  // budget, so fewer run at once.
  r.state_checkpoints = false;
  r.max_num_seqs = 64;
  b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->num_state_checkpoints, 0);
  EXPECT_EQ(b->num_state_slots, kGiB / 2 / (12 * (int64_t{1} << 20)));
  EXPECT_LE(b->state_bytes, kGiB / 2);
  // One sequence's slot must fit beside its blocks.
  r.layout.state = RecurrentStateLayout{1, int64_t{1} << 28};  // 1 GiB
  EXPECT_FALSE(plan_kv_cache(r, ram(24)).ok());
}

TEST(KVBudget, SpeculativeDecodingPricesTheDraftSnapshotsOfEachSlot) {
  KVBudgetRequest r = request();
  r.kv_cache_memory_bytes = 1 * kGiB;
  r.layout.state = RecurrentStateLayout{3, int64_t{1} << 20};  // 12 MiB per slot
  r.max_num_seqs = 8;
  r.state_checkpoints = true;
  r.state_snapshots_per_seq = 3;
  auto b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->num_state_slots, 8);
  EXPECT_EQ(b->num_state_checkpoints, 8);
  EXPECT_EQ(b->num_state_snapshots, 24);
  EXPECT_EQ(b->state_bytes, (8 + 8 + 24) * 12 * (int64_t{1} << 20));
  EXPECT_EQ(b->num_blocks, (kGiB - b->state_bytes) / 368640);
  // Five states per sequence: 8 of them would be 480 MiB, under half; 16 would not.
  r.max_num_seqs = 16;
  b = plan_kv_cache(r, ram(24));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->num_state_slots, kGiB / 2 / (5 * 12 * (int64_t{1} << 20)));
  EXPECT_EQ(b->num_state_snapshots, 3 * b->num_state_slots);
  EXPECT_LE(b->state_bytes, kGiB / 2);
}

TEST(KVBudget, RejectsBadFlags) {
  KVBudgetRequest both = request();
  both.kv_cache_memory_bytes = kGiB;
  both.memory_utilization = 0.5;
  EXPECT_FALSE(plan_kv_cache(both, ram(24)).ok());
  KVBudgetRequest zero = request();
  zero.memory_utilization = 0.0;
  EXPECT_FALSE(plan_kv_cache(zero, ram(24)).ok());
  KVBudgetRequest over = request();
  over.memory_utilization = 1.5;
  EXPECT_FALSE(plan_kv_cache(over, ram(24)).ok());
  KVBudgetRequest negative = request();
  negative.kv_cache_memory_bytes = -1;
  EXPECT_FALSE(plan_kv_cache(negative, ram(24)).ok());
}

TEST(KVBudget, ParsesByteCountsLikeVllm) {
  EXPECT_EQ(*parse_byte_count("123"), 123);
  EXPECT_EQ(*parse_byte_count("1k"), 1000);
  EXPECT_EQ(*parse_byte_count("1K"), 1024);
  EXPECT_EQ(*parse_byte_count("2m"), 2000000);
  EXPECT_EQ(*parse_byte_count("2M"), 2 * 1024 * 1024);
  EXPECT_EQ(*parse_byte_count("4G"), 4 * kGiB);
  EXPECT_EQ(*parse_byte_count("1t"), int64_t{1000000000000});
  for (const char* bad : {"", "G", "1.5G", "4GB", "4x", "-1", " 4", "99999999999999999999"})
    EXPECT_FALSE(parse_byte_count(bad).ok()) << bad;
}

TEST(KVBudget, ReadsThisMachinesMemory) {
  auto m = read_memory_info();
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_GT(m->total_bytes, 0);
  EXPECT_GT(m->available_bytes, 0);
  EXPECT_LE(m->available_bytes, m->total_bytes);
}

}  // namespace
}  // namespace kestrel
