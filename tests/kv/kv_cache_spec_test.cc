// KV cache specs and how layers form groups over one pool: bytes per block, grouping by spec
// with equal group sizes, the layer → (group, index) map, budgets and per-request bounds.
#include "kv/kv_cache_spec.h"

#include <gtest/gtest.h>

#include <vector>

namespace kestrel {
namespace {

KVCacheSpec full(int32_t heads = 4, int32_t dim = 64) {
  return KVCacheSpec{KVCacheKind::kFullAttention, 1, 16, heads, dim, 2 * dim, 0};
}
KVCacheSpec sliding(int32_t window, int32_t heads = 4, int32_t dim = 64) {
  return KVCacheSpec{KVCacheKind::kSlidingWindow, 1, 16, heads, dim, 2 * dim, window};
}

TEST(KVCacheSpec, FullAttentionBytesCountKAndV) {
  // 2 (K,V) * 32 layers * 16 tokens * 8 heads * 128 dims * 2 bytes.
  const KVCacheSpec spec{KVCacheKind::kFullAttention, 32, 16, 8, 128, 256};
  EXPECT_EQ(spec.bytes_per_block(), 2 * 32 * 16 * 8 * 128 * 2);
}

TEST(KVCacheSpec, MlaLatentHasOnePlane) {
  const KVCacheSpec spec{KVCacheKind::kMlaLatent, 61, 64, 1, 576, 1152};
  EXPECT_EQ(spec.bytes_per_block(), 61 * 64 * 576 * 2);
}

TEST(KVCacheLayout, OneSpecIsOneGroupOfAllLayers) {
  const std::vector<KVCacheSpec> layers(5, full());
  auto l = plan_kv_cache_layout(layers);
  ASSERT_TRUE(l.ok()) << l.error().message;
  ASSERT_EQ(l->groups.size(), 1u);
  EXPECT_EQ(l->layers_per_block, 5);
  for (int32_t i = 0; i < 5; ++i) EXPECT_EQ(l->layers[size_t(i)], (LayerPlace{0, i}));
  EXPECT_EQ(l->bytes_per_block(), 2 * 5 * 16 * 4 * 64 * 2);
  EXPECT_EQ(l->bytes_per_block(), uniform_kv_cache_layout(full(), 5).bytes_per_block());
  EXPECT_EQ(num_blocks_for_budget(*l, 10 * l->bytes_per_block() + 7), 10);
}

// Qwen2 with max_window_layers 1 of 3: one full layer, two sliding ones. The rarest spec has one
// layer, so every group has one: three groups, each block one layer's bytes.
TEST(KVCacheLayout, MixedSpecsSplitIntoEqualGroups) {
  const std::vector<KVCacheSpec> layers = {full(), sliding(6), sliding(6)};
  auto l = plan_kv_cache_layout(layers);
  ASSERT_TRUE(l.ok()) << l.error().message;
  ASSERT_EQ(l->groups.size(), 3u);
  EXPECT_EQ(l->layers_per_block, 1);
  EXPECT_EQ(l->groups[0].kind, KVCacheKind::kFullAttention);
  EXPECT_EQ(l->groups[1].kind, KVCacheKind::kSlidingWindow);
  EXPECT_EQ(l->groups[2].sliding_window, 6);
  EXPECT_EQ(l->layers, (std::vector<LayerPlace>{{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_EQ(l->bytes_per_block(), 2 * 1 * 16 * 4 * 64 * 2);

  // Gemma-like: sliding, sliding, full, sliding, sliding, full → groups of two.
  const std::vector<KVCacheSpec> six = {sliding(8), sliding(8), full(),
                                        sliding(8), sliding(8), full()};
  auto g = plan_kv_cache_layout(six);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->layers_per_block, 2);
  ASSERT_EQ(g->groups.size(), 3u);
  EXPECT_EQ(g->group_layers, (std::vector<std::vector<int32_t>>{{0, 1}, {3, 4}, {2, 5}}));
  EXPECT_EQ(g->layers[2], (LayerPlace{2, 0}));
  EXPECT_EQ(g->layers[4], (LayerPlace{1, 1}));
}

TEST(KVCacheLayout, MaxBlocksPerRequestBoundsWindows) {
  auto l = plan_kv_cache_layout(std::vector<KVCacheSpec>{full(), sliding(33)});
  ASSERT_TRUE(l.ok());
  // 1000 tokens: 63 full blocks; a 33-token window read from a 64-token step spans
  // ceil(96 / 16) + 1 = 7 blocks.
  EXPECT_EQ(max_blocks_per_request(l->groups, 1000, 64), 63 + 7);
  EXPECT_EQ(max_blocks_per_request(l->groups, 20, 64), 2 + 2);  // never more than the tokens need
}

TEST(KVCacheLayout, RejectsWhatOnePoolCannotHold) {
  EXPECT_FALSE(plan_kv_cache_layout({}).ok());
  KVCacheSpec other_block = full();
  other_block.block_size = 32;
  EXPECT_FALSE(plan_kv_cache_layout(std::vector<KVCacheSpec>{full(), other_block}).ok());
  // Different bytes per layer block (more heads) cannot share blocks.
  EXPECT_FALSE(plan_kv_cache_layout(std::vector<KVCacheSpec>{full(), sliding(4, 8)}).ok());
  EXPECT_FALSE(plan_kv_cache_layout(std::vector<KVCacheSpec>{full(0)}).ok());
  EXPECT_FALSE(plan_kv_cache_layout(std::vector<KVCacheSpec>{sliding(0)}).ok());
  KVCacheSpec state = full();
  state.kind = KVCacheKind::kLinearAttentionState;
  EXPECT_FALSE(plan_kv_cache_layout(std::vector<KVCacheSpec>{state}).ok());
}

}  // namespace
}  // namespace kestrel
