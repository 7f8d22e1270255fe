#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace kestrel {
namespace {

std::vector<int32_t> block_tokens(int32_t seed) {
  return {seed, seed * 3 + 1, seed * 7 + 2, seed * 11 + 5};
}

BlockHash hash_of(int32_t seed) {
  return hash_block(std::nullopt, block_tokens(seed), {});
}

TEST(BlockPool, AllocatesEveryUsableBlockOnceAndNeverTheNullBlock) {
  BlockPool pool(9);
  EXPECT_EQ(pool.num_free(), 8);
  auto blocks = pool.allocate(8);
  ASSERT_TRUE(blocks.ok()) << blocks.error().message;
  const std::set<BlockId> unique(blocks->begin(), blocks->end());
  EXPECT_EQ(unique.size(), 8u);
  EXPECT_FALSE(unique.contains(kNullBlock));
  for (BlockId b : *blocks) EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, FailedAllocateChangesNothing) {
  BlockPool pool(5);
  auto held = pool.allocate(2);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(pool.cache_full_block((*held)[0], hash_of(1), block_tokens(1)));
  pool.free(*held);  // both free again, one still cached
  EXPECT_FALSE(pool.allocate(5).ok());
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.lookup(hash_of(1), block_tokens(1)), (*held)[0]);
  EXPECT_EQ(pool.check_invariants(), "");
  EXPECT_FALSE(pool.allocate(-1).ok());
}

TEST(BlockPool, RefcountsTrackTouchAndFree) {
  BlockPool pool(4);
  auto blocks = pool.allocate(1);
  ASSERT_TRUE(blocks.ok());
  const BlockId b = (*blocks)[0];
  pool.touch(*blocks);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.free(*blocks);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.num_free(), 2);
  pool.free(*blocks);
  EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, NullBlockIsSkippedByFreeAndTouch) {
  BlockPool pool(3);
  const std::vector<BlockId> null_only = {kNullBlock};
  pool.touch(null_only);
  pool.free(null_only);
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, EvictsInFreeOrderAndDropsTheHashEntry) {
  BlockPool pool(5);
  auto blocks = pool.allocate(4);
  ASSERT_TRUE(blocks.ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.cache_full_block((*blocks)[i], hash_of(i), block_tokens(i)));
  }
  // Free in the order 2, 0, 3, 1: that is the eviction order.
  const std::vector<BlockId> order = {(*blocks)[2], (*blocks)[0], (*blocks)[3], (*blocks)[1]};
  pool.free(order);
  EXPECT_EQ(pool.num_cached(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pool.lookup(hash_of(i), block_tokens(i)), (*blocks)[i]);

  auto first = pool.allocate(1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0], (*blocks)[2]);
  EXPECT_FALSE(pool.lookup(hash_of(2), block_tokens(2)).has_value());
  EXPECT_FALSE(pool.is_cached((*blocks)[2]));
  auto next = pool.allocate(2);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, (std::vector<BlockId>{(*blocks)[0], (*blocks)[3]}));
  EXPECT_EQ(pool.lookup(hash_of(1), block_tokens(1)), (*blocks)[1]);
  EXPECT_EQ(pool.num_cached(), 1u);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, TouchPullsACachedFreeBlockOffTheFreeList) {
  BlockPool pool(4);
  auto blocks = pool.allocate(3);
  ASSERT_TRUE(blocks.ok());
  ASSERT_TRUE(pool.cache_full_block((*blocks)[0], hash_of(5), block_tokens(5)));
  pool.free(*blocks);  // eviction order: blocks[0], blocks[1], blocks[2]
  const auto hit = pool.lookup(hash_of(5), block_tokens(5));
  ASSERT_EQ(hit, (*blocks)[0]);
  pool.touch(std::vector<BlockId>{*hit});
  EXPECT_EQ(pool.ref_count(*hit), 1);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.check_invariants(), "");
  // The touched block is no longer evictable: the other two go first, then allocation fails.
  auto rest = pool.allocate(2);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, (std::vector<BlockId>{(*blocks)[1], (*blocks)[2]}));
  EXPECT_FALSE(pool.allocate(1).ok());
  EXPECT_EQ(pool.lookup(hash_of(5), block_tokens(5)), (*blocks)[0]);
}

TEST(BlockPool, LookupVerifiesStoredTokens) {
  BlockPool pool(3);
  auto blocks = pool.allocate(2);
  ASSERT_TRUE(blocks.ok());
  // Forge a collision: block 0 claims hash_of(1) but holds other tokens.
  ASSERT_TRUE(pool.cache_full_block((*blocks)[0], hash_of(1), block_tokens(2)));
  EXPECT_FALSE(pool.lookup(hash_of(1), block_tokens(1)).has_value());
  EXPECT_EQ(pool.lookup(hash_of(1), block_tokens(2)), (*blocks)[0]);
  // The hash is taken, and a block is cached at most once.
  EXPECT_FALSE(pool.cache_full_block((*blocks)[1], hash_of(1), block_tokens(1)));
  EXPECT_FALSE(pool.cache_full_block((*blocks)[0], hash_of(3), block_tokens(3)));
  EXPECT_FALSE(pool.is_cached((*blocks)[1]));
  EXPECT_EQ(pool.check_invariants(), "");
}

}  // namespace
}  // namespace kestrel
