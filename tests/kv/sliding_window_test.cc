// Sliding-window groups in the KV cache coordinator: blocks that fall out of every later
// query's window go back to the pool (null in the table), a long request holds about
// window / block_size blocks, and a prefix hit needs only the blocks of the last window — in
// a hybrid layout, the longest prefix every group can start from.
#include <gtest/gtest.h>

#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_test_hashes.h"

namespace kestrel {
namespace {

constexpr int32_t kBlock = 4;

KVCacheSpec sliding(int32_t window) {
  KVCacheSpec s;
  s.kind = KVCacheKind::kSlidingWindow;
  s.sliding_window = window;
  return s;
}

std::vector<int32_t> tokens(int n, int32_t seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(seed * 1000 + i * 13 + 1);
  return t;
}

// Decodes `n` tokens one step at a time after the prompt, publishing as the scheduler does.
void decode(KVCacheManager& m, RequestHandle id, const std::vector<int32_t>& all, int64_t from,
            int64_t n) {
  for (int64_t c = from; c < from + n; ++c) {
    ASSERT_TRUE(m.allocate_slots(id, 1));
    m.cache_blocks(id, all, c + 1, test::hashes_of(m, all));
  }
}

TEST(SlidingWindow, LongRequestHoldsAboutOneWindow) {
  // Window 6 over blocks of 4: a query reads 5 earlier keys, at most 3 blocks with its own.
  KVCacheManager m(64, kBlock, true, {KVCacheSpec{}, sliding(6)});
  const std::vector<int32_t> all = tokens(200, 1);
  ASSERT_TRUE(m.allocate_slots(1, 8));
  m.cache_blocks(1, all, 8, test::hashes_of(m, all));
  decode(m, 1, all, 8, 150);
  EXPECT_EQ(m.num_held_blocks(1, 0), 40);  // full attention: every block of 158 tokens
  EXPECT_LE(m.num_held_blocks(1, 1), 3);
  EXPECT_GE(m.num_held_blocks(1, 1), 2);
  // The table keeps its length; dropped entries are the null block.
  const std::span<const BlockId> t = m.block_table(1, 1);
  ASSERT_EQ(t.size(), 40u);
  EXPECT_EQ(t[0], kNullBlock);
  EXPECT_NE(t.back(), kNullBlock);
  // What the pool lent is exactly what the two groups hold.
  EXPECT_EQ(m.pool().num_free(),
            m.pool().num_blocks() - 1 - m.num_held_blocks(1, 0) - m.num_held_blocks(1, 1));
  m.free(1);
  EXPECT_EQ(m.pool().num_free(), m.pool().num_blocks() - 1);
}

TEST(SlidingWindow, ChunkedPrefillKeepsTheWindowBeforeEachChunk) {
  KVCacheManager m(64, kBlock, true, {sliding(5)});
  const std::vector<int32_t> all = tokens(40, 2);
  // Chunks of 8: before the chunk at 16, keys 12.. stay (16 - 5 + 1 = 12: block 3 on).
  for (int64_t c = 0; c < 24; c += 8) {
    ASSERT_TRUE(m.allocate_slots(1, 8));
    m.cache_blocks(1, all, c + 8, test::hashes_of(m, all));
  }
  const std::span<const BlockId> t = m.block_table(1);
  ASSERT_EQ(t.size(), 6u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(t[i], kNullBlock) << i;
  for (size_t i = 3; i < 6; ++i) EXPECT_NE(t[i], kNullBlock) << i;
}

TEST(SlidingWindow, PrefixHitNeedsOnlyTheLastWindow) {
  KVCacheManager m(64, kBlock, true, {sliding(6)});  // needs ceil(5 / 4) = 2 blocks
  const std::vector<int32_t> prompt = tokens(30, 3);
  ASSERT_TRUE(m.allocate_slots(2, 30));
  m.cache_blocks(2, prompt, 30, test::hashes_of(m, prompt));
  m.free(2);
  // Same prompt: 7 full blocks below the last token, all cached → hit of 28 tokens with only
  // the last two blocks kept.
  ComputedBlocks hit = m.get_computed_blocks(prompt, test::hashes_of(m, prompt));
  EXPECT_EQ(hit.num_tokens, 28);
  ASSERT_EQ(hit.blocks[0].size(), 7u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(hit.blocks[0][i], kNullBlock) << i;
  EXPECT_NE(hit.blocks[0][5], kNullBlock);
  EXPECT_NE(hit.blocks[0][6], kNullBlock);
  const int32_t free_before = m.pool().num_free();
  ASSERT_TRUE(m.allocate_slots(3, 2, hit));
  EXPECT_EQ(m.num_held_blocks(3, 0), 2 + 1);  // the two hit blocks and one for 28..31
  EXPECT_EQ(m.pool().num_free(), free_before - 3);
  m.free(3);
}

TEST(SlidingWindow, PrefixHitEndsAtTheLastCompleteWindow) {
  KVCacheManager m(64, kBlock, true, {sliding(6)});
  const std::vector<int32_t> prompt = tokens(30, 4);
  ASSERT_TRUE(m.allocate_slots(2, 30));
  m.cache_blocks(2, prompt, 30, test::hashes_of(m, prompt));
  // A prompt that agrees with "a" for 22 tokens: blocks 0..4 match, block 5 onwards differ.
  std::vector<int32_t> other = prompt;
  other[22] = 77;
  ComputedBlocks hit = m.get_computed_blocks(other, test::hashes_of(m, other));
  EXPECT_EQ(hit.num_tokens, 20);  // blocks 3 and 4 end a full window at 20
  // Blocks inside the window missing: an edit at 13 leaves blocks 0..2 → hit 12, not 20.
  other = prompt;
  other[13] = 77;
  hit = m.get_computed_blocks(other, test::hashes_of(m, other));
  EXPECT_EQ(hit.num_tokens, 12);
  m.free(2);
}

// Full attention needs the whole prefix, the window only its tail: the coordinator takes the
// longest prefix both can start from.
TEST(SlidingWindow, HybridHitIsValidInEveryGroup) {
  KVCacheManager m(128, kBlock, true, {KVCacheSpec{}, sliding(6)});
  const std::vector<int32_t> prompt = tokens(41, 5);
  ASSERT_TRUE(m.allocate_slots(2, 41));
  m.cache_blocks(2, prompt, 41, test::hashes_of(m, prompt));
  m.free(2);
  ComputedBlocks hit = m.get_computed_blocks(prompt, test::hashes_of(m, prompt));
  EXPECT_EQ(hit.num_tokens, 40);
  ASSERT_EQ(hit.blocks.size(), 2u);
  EXPECT_EQ(hit.blocks[0].size(), 10u);
  for (BlockId b : hit.blocks[0]) EXPECT_NE(b, kNullBlock);
  EXPECT_EQ(hit.blocks[1][0], kNullBlock);
  EXPECT_NE(hit.blocks[1][9], kNullBlock);
  // Evict the full group's copies of blocks 8 and 9. The free list runs: 105 blocks never
  // used, then "a"'s full-attention blocks tail first (10, 9, 8, ...), then its window blocks.
  // 216 tokens take 54 blocks in each group: 108 from the head, through full blocks 10, 9, 8.
  ASSERT_EQ(m.pool().num_free(), 127);
  ASSERT_TRUE(m.allocate_slots(4, 216));
  m.free(4);
  hit = m.get_computed_blocks(prompt, test::hashes_of(m, prompt));
  // Full attention now stops at block 8; the window's copies of blocks 6 and 7 end it there.
  EXPECT_EQ(hit.num_tokens, 32);
  ASSERT_EQ(hit.blocks[0].size(), 8u);
  ASSERT_EQ(hit.blocks[1].size(), 8u);
  EXPECT_EQ(hit.blocks[1][5], kNullBlock);
  EXPECT_NE(hit.blocks[1][6], kNullBlock);
  EXPECT_NE(hit.blocks[1][7], kNullBlock);
}

}  // namespace
}  // namespace kestrel
