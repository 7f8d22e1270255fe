// StateCheckpoints (the linear-attention states kept for prefix hits) and the KVCacheManager's
// use of them: a reservation is findable only once committed and gone when aborted, the least
// recently used committed checkpoint is taken when all are in use, a released one frees its
// slot, and a prefix hit ends at the longest prefix that has a checkpoint.
#include <gtest/gtest.h>

#include <numeric>

#include "kv/kv_cache_manager.h"
#include "kv/state_checkpoints.h"

namespace kestrel {
namespace {

BlockHash h(uint64_t v) {
  return BlockHash{v, ~v};
}

TEST(StateCheckpoints, ReservedOnesAreFoundOnlyAfterCommit) {
  StateCheckpoints c(10, 2);
  const auto a = c.reserve(h(1));
  ASSERT_TRUE(a.has_value());
  EXPECT_GE(*a, 10);
  EXPECT_LT(*a, 12);
  EXPECT_FALSE(c.has(h(1)));
  EXPECT_FALSE(c.find(h(1)).has_value());
  EXPECT_FALSE(c.reserve(h(1)).has_value()) << "the same prefix is saved once";
  c.commit();
  EXPECT_EQ(c.find(h(1)), a);
  const auto b = c.reserve(h(2));
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*b, *a);
  c.abort();  // its step failed: nothing was written
  EXPECT_FALSE(c.has(h(2)));
  EXPECT_EQ(c.find(h(1)), a);
}

TEST(StateCheckpoints, TheLeastRecentlyUsedCommittedOneIsReused) {
  StateCheckpoints c(0, 2);
  const auto a = c.reserve(h(1));
  const auto b = c.reserve(h(2));
  c.commit();
  EXPECT_EQ(c.find(h(1)), a);  // h(2) is now the least recently used
  c.commit();                  // (a step later: found ones are kept for their step)
  const auto d = c.reserve(h(3));
  EXPECT_EQ(d, b);
  EXPECT_FALSE(c.has(h(2)));
  // h(1) is the only committed one left; once it is taken too, this step's own reservations
  // are never taken.
  EXPECT_EQ(c.reserve(h(4)), a);
  EXPECT_FALSE(c.reserve(h(5)).has_value());
  c.commit();
  EXPECT_FALSE(c.has(h(1)));
  EXPECT_TRUE(c.has(h(3)));
  EXPECT_TRUE(c.has(h(4)));
}

// A checkpoint found while a step is scheduled is that step's to copy from: neither a
// reservation nor a take evicts it before the step is committed (or aborted).
TEST(StateCheckpoints, OneFoundThisStepIsNotEvictedUntilTheStepEnds) {
  StateCheckpoints c(0, 1);
  const auto a = c.reserve(h(1));
  c.commit();
  EXPECT_EQ(c.find(h(1)), a);
  EXPECT_FALSE(c.reserve(h(2)).has_value());
  EXPECT_FALSE(c.take().has_value());
  EXPECT_TRUE(c.has(h(1)));
  c.abort();
  EXPECT_EQ(c.take(), a);
  EXPECT_FALSE(c.has(h(1)));
}

// A taken slot leaves the pool (for a request's state under a KV transfer): never evicted or
// reserved until put back, and a take evicts the least recently used checkpoint when none is
// free.
TEST(StateCheckpoints, TakenSlotsLeaveThePoolUntilPutBack) {
  StateCheckpoints c(10, 3);
  const auto a = c.take();
  ASSERT_TRUE(a.has_value());
  EXPECT_GE(*a, 10);
  EXPECT_LT(*a, 13);
  const auto b = c.reserve(h(1));
  const auto d = c.reserve(h(2));
  c.commit();
  EXPECT_EQ(c.num_taken(), 1);
  EXPECT_NE(*b, *a);
  EXPECT_NE(*d, *a);
  EXPECT_EQ(c.reserve(h(3)), b);  // evicts h(1), never the taken slot
  c.commit();
  EXPECT_FALSE(c.has(h(1)));
  EXPECT_EQ(c.take(), d);  // h(2) was the least recently used left
  EXPECT_FALSE(c.has(h(2)));
  EXPECT_EQ(c.num_taken(), 2);
  c.commit();
  // Slot b holds h(3) now; with a and d taken, one more take evicts it, and then none is left.
  EXPECT_EQ(c.take(), b);
  EXPECT_FALSE(c.take().has_value());
  c.put_back(*a);
  EXPECT_EQ(c.num_taken(), 2);
  EXPECT_EQ(c.reserve(h(4)), a);
}

// A released checkpoint frees its slot for the next reservation, whichever is least recently
// used; a pending one (its step has not run) is not released.
TEST(StateCheckpoints, AReleasedOneFreesItsSlot) {
  StateCheckpoints c(0, 2);
  const auto a = c.reserve(h(1));
  const auto b = c.reserve(h(2));
  c.commit();
  c.release(h(2));
  EXPECT_FALSE(c.has(h(2)));
  EXPECT_EQ(c.reserve(h(3)), b);  // not a, the least recently used
  c.release(h(3));                // pending: stays
  c.commit();
  EXPECT_TRUE(c.has(h(3)));
  EXPECT_EQ(c.find(h(1)), a);
  c.release(h(9));  // none: nothing happens
  EXPECT_TRUE(c.has(h(1)));
}

TEST(StateCheckpoints, NoSlotsNoCheckpoints) {
  StateCheckpoints c(0, 0);
  EXPECT_FALSE(c.reserve(h(1)).has_value());
}

TEST(StateCheckpoints, PrefixHitsEndWhereACheckpointIs) {
  constexpr int32_t kBlock = 4;
  std::vector<int32_t> tokens(21);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<BlockHash> hashes;
  extend_block_hashes(tokens, kBlock, {}, &hashes);
  ASSERT_EQ(hashes.size(), 5u);
  KVCacheManager kv(64, kBlock, true, {}, StateCheckpointConfig{true, 8, 4});
  // A first request caches every full block; the state is kept after blocks 2 and 4.
  ASSERT_TRUE(kv.allocate_slots(1, int64_t(tokens.size())));
  kv.cache_blocks(1, tokens, int64_t(tokens.size()), hashes);
  const auto after2 = kv.reserve_checkpoint(hashes, 2);
  const auto after4 = kv.reserve_checkpoint(hashes, 4);
  ASSERT_TRUE(after2 && after4);
  kv.free(1);
  // Not committed yet: the blocks are there but no state to resume from.
  EXPECT_EQ(kv.get_computed_blocks(tokens, hashes).num_blocks, 0);
  kv.commit_checkpoints();
  ComputedBlocks hit = kv.get_computed_blocks(tokens, hashes);
  EXPECT_EQ(hit.num_blocks, 4);  // 5 full blocks cached, the last token never covered
  EXPECT_EQ(hit.state_checkpoint, *after4);
  // A prompt diverging in block 4 resumes after block 2.
  std::vector<int32_t> other = tokens;
  other[14] = 7;
  std::vector<BlockHash> other_hashes;
  extend_block_hashes(other, kBlock, {}, &other_hashes);
  hit = kv.get_computed_blocks(other, other_hashes);
  EXPECT_EQ(hit.num_blocks, 2);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(hit.state_checkpoint, *after2);
  ASSERT_EQ(hit.blocks.size(), 1u);
  EXPECT_EQ(hit.blocks[0].size(), 2u);
}

TEST(StateCheckpoints, WithoutCheckpointSlotsNothingIsHit) {
  std::vector<int32_t> tokens(9, 5);
  std::vector<BlockHash> hashes;
  extend_block_hashes(tokens, 4, {}, &hashes);
  KVCacheManager kv(16, 4, true, {}, StateCheckpointConfig{true, 1, 0});
  ASSERT_TRUE(kv.allocate_slots(1, 9));
  kv.cache_blocks(1, tokens, 9, hashes);
  EXPECT_FALSE(kv.reserve_checkpoint(hashes, 2).has_value());
  kv.free(1);
  EXPECT_EQ(kv.get_computed_blocks(tokens, hashes).num_blocks, 0);
  EXPECT_FALSE(kv.checkpoints_state());
}

}  // namespace
}  // namespace kestrel
