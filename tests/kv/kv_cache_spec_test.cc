#include "kv/kv_cache_spec.h"

#include <gtest/gtest.h>

#include <vector>

namespace kestrel {
namespace {

TEST(KVCacheSpec, FullAttentionBytesCountKAndV) {
  // 2 (K,V) * 32 layers * 16 tokens * 8 heads * 128 dims * 2 bytes.
  const KVCacheSpec spec{KVCacheKind::kFullAttention, 32, 16, 8, 128, 2};
  EXPECT_EQ(spec.bytes_per_block(), 2 * 32 * 16 * 8 * 128 * 2);
}

TEST(KVCacheSpec, MlaLatentHasOnePlane) {
  const KVCacheSpec spec{KVCacheKind::kMlaLatent, 61, 64, 1, 576, 2};
  EXPECT_EQ(spec.bytes_per_block(), 61 * 64 * 576 * 2);
}

TEST(KVCacheSpec, BudgetSharesOnePoolAcrossGroups) {
  const std::vector<KVCacheSpec> groups = {{KVCacheKind::kFullAttention, 2, 16, 4, 64, 2},
                                           {KVCacheKind::kSlidingWindow, 3, 16, 2, 64, 1}};
  const int64_t per_block = 2 * 2 * 16 * 4 * 64 * 2 + 2 * 3 * 16 * 2 * 64 * 1;
  auto n = num_blocks_for_budget(groups, 10 * per_block + per_block - 1);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, 10);
}

TEST(KVCacheSpec, BudgetRejectsBadGroups) {
  EXPECT_FALSE(num_blocks_for_budget({}, 1 << 20).ok());
  const std::vector<KVCacheSpec> mixed = {{KVCacheKind::kFullAttention, 1, 16, 1, 64, 2},
                                          {KVCacheKind::kFullAttention, 1, 32, 1, 64, 2}};
  EXPECT_FALSE(num_blocks_for_budget(mixed, 1 << 20).ok());
  const std::vector<KVCacheSpec> zero = {{KVCacheKind::kFullAttention, 1, 16, 0, 64, 2}};
  EXPECT_FALSE(num_blocks_for_budget(zero, 1 << 20).ok());
  const std::vector<KVCacheSpec> state = {{KVCacheKind::kLinearAttentionState, 1, 16, 1, 64, 2}};
  EXPECT_FALSE(num_blocks_for_budget(state, 1 << 20).ok());
}

}  // namespace
}  // namespace kestrel
