#include "kv/kv_cache_manager.h"
#include "kv/kv_test_hashes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace kestrel {
namespace {

constexpr int32_t kBlock = 4;

std::vector<int32_t> make_tokens(int n, int32_t seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(seed * 1000 + i * 13 + 1);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Admits a request the way the scheduler does and computes its whole prompt.
void run_prefill(KVCacheManager& m, RequestHandle id, const std::vector<int32_t>& tokens) {
  const ComputedBlocks hit = m.get_computed_blocks(tokens, test::hashes_of(m, tokens));
  ASSERT_TRUE(m.allocate_slots(id, static_cast<int64_t>(tokens.size()) - hit.num_tokens, hit));
  m.cache_blocks(id, tokens, static_cast<int64_t>(tokens.size()), test::hashes_of(m, tokens));
}

TEST(KVCacheManager, SharedPrefixHitsAcrossRequests) {
  KVCacheManager m(32, kBlock);
  const std::vector<int32_t> prefix = make_tokens(12, 1);  // three full blocks
  const std::vector<int32_t> a = concat(prefix, make_tokens(6, 2));
  const std::vector<int32_t> b = concat(prefix, make_tokens(3, 3));
  run_prefill(m, 1, a);
  EXPECT_EQ(m.prefix_cache_hits(), 0);
  EXPECT_EQ(m.prefix_cache_queries(), 18);

  const ComputedBlocks hit = m.get_computed_blocks(b, test::hashes_of(m, b));
  EXPECT_EQ(hit.num_tokens, 12);
  ASSERT_EQ(hit.blocks[0].size(), 3u);
  const auto table_a = m.block_table(1);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(hit.blocks[0][i], table_a[i]);
  // A lookup alone counts nothing: a request blocked on memory looks up again every step.
  EXPECT_EQ(m.prefix_cache_hits(), 0);
  EXPECT_EQ(m.prefix_cache_queries(), 18);

  ASSERT_TRUE(m.allocate_slots(2, 3, hit));
  EXPECT_EQ(m.prefix_cache_hits(), 12);
  EXPECT_EQ(m.prefix_cache_queries(), 18 + 15);
  const auto table_b = m.block_table(2);
  ASSERT_EQ(table_b.size(), 4u);  // 15 tokens
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(table_b[i], table_a[i]);
    EXPECT_EQ(m.pool().ref_count(table_a[i]), 2);
  }
  EXPECT_NE(table_b[3], table_a[3]);
  EXPECT_EQ(m.pool().check_invariants(), "");
}

TEST(KVCacheManager, LastTokenIsAlwaysRecomputed) {
  KVCacheManager m(32, kBlock);
  const std::vector<int32_t> prompt = make_tokens(8, 4);  // exactly two blocks
  run_prefill(m, 1, prompt);
  const ComputedBlocks hit = m.get_computed_blocks(prompt, test::hashes_of(m, prompt));
  // The second block holds the last token, so only the first can be reused.
  EXPECT_EQ(hit.num_tokens, 4);
  EXPECT_EQ(hit.blocks[0].size(), 1u);
  const std::vector<int32_t> longer = concat(prompt, {77});
  EXPECT_EQ(m.get_computed_blocks(longer, test::hashes_of(m, longer)).num_tokens, 8);
}

// A forged hash collision is rejected by BlockPool::lookup (see block_pool_test); here the
// manager must not reuse a block whose tokens differ anywhere, nor any block after it.
TEST(KVCacheManager, TokenEditBreaksTheChainFromThatBlockOn) {
  KVCacheManager m(16, kBlock);
  const std::vector<int32_t> prompt = make_tokens(13, 5);
  run_prefill(m, 1, prompt);
  std::vector<int32_t> edited = prompt;
  edited[6] += 1;  // inside the second block
  const ComputedBlocks hit = m.get_computed_blocks(edited, test::hashes_of(m, edited));
  EXPECT_EQ(hit.num_tokens, 4);
  ASSERT_EQ(hit.blocks[0].size(), 1u);
  EXPECT_EQ(hit.blocks[0][0], m.block_table(1)[0]);
}

TEST(KVCacheManager, FreedBlocksStayCachedUntilEvicted) {
  KVCacheManager m(7, kBlock);  // 6 usable blocks
  const std::vector<int32_t> prompt = make_tokens(13, 7);
  run_prefill(m, 1, prompt);
  const std::vector<BlockId> old(m.block_table(1).begin(), m.block_table(1).end());
  m.free(1);
  EXPECT_EQ(m.pool().num_free(), 6);
  EXPECT_EQ(m.num_requests(), 0u);

  const ComputedBlocks hit = m.get_computed_blocks(prompt, test::hashes_of(m, prompt));
  EXPECT_EQ(hit.num_tokens, 12);
  ASSERT_TRUE(m.allocate_slots(3, 1, hit));
  const auto table = m.block_table(3);
  EXPECT_EQ(std::vector<BlockId>(table.begin(), table.begin() + 3),
            std::vector<BlockId>(old.begin(), old.begin() + 3));
  m.free(3);

  // Another request needing every block evicts them all, and the mapping goes with them.
  const std::vector<int32_t> big = make_tokens(24, 8);
  ASSERT_TRUE(m.allocate_slots(4, 24));
  EXPECT_EQ(m.pool().num_cached(), 0u);
  EXPECT_EQ(m.get_computed_blocks(prompt, test::hashes_of(m, prompt)).num_tokens, 0);
  EXPECT_EQ(m.pool().check_invariants(), "");
}

TEST(KVCacheManager, RequestTailBlocksAreEvictedFirst) {
  KVCacheManager m(5, kBlock);                             // 4 usable blocks
  const std::vector<int32_t> prompt = make_tokens(13, 9);  // 3 full blocks + 1 partial
  run_prefill(m, 1, prompt);
  m.free(1);
  // One new block evicts the partial tail block (never cached), the next the last full block.
  ASSERT_TRUE(m.allocate_slots(5, 2 * kBlock));
  EXPECT_EQ(m.get_computed_blocks(prompt, test::hashes_of(m, prompt)).num_tokens, 8);
}

TEST(KVCacheManager, FailedAllocateLeavesStateUnchanged) {
  KVCacheManager m(5, kBlock);  // 4 usable blocks
  const std::vector<int32_t> prompt = make_tokens(9, 10);
  run_prefill(m, 1, prompt);  // 3 blocks
  m.free(1);
  const ComputedBlocks hit = m.get_computed_blocks(prompt, test::hashes_of(m, prompt));
  ASSERT_EQ(hit.num_tokens, 8);
  // The two hit blocks are free, so touching them costs free blocks too: 2 + 3 new > 4.
  EXPECT_FALSE(m.allocate_slots(2, 10, hit));
  EXPECT_EQ(m.pool().num_free(), 4);
  EXPECT_TRUE(m.block_table(2).empty());
  EXPECT_EQ(m.num_requests(), 0u);
  EXPECT_EQ(m.pool().check_invariants(), "");
  EXPECT_TRUE(m.allocate_slots(2, 8, hit));
  EXPECT_EQ(m.pool().num_free(), 0);
  // Growth beyond the pool fails without touching the request's table.
  EXPECT_FALSE(m.allocate_slots(2, 1));
  EXPECT_EQ(m.block_table(2).size(), 4u);
  EXPECT_EQ(m.num_slots(2), 16);
}

TEST(KVCacheManager, DecodeGrowthAllocatesOnBlockBoundaries) {
  KVCacheManager m(16, kBlock);
  ASSERT_TRUE(m.allocate_slots(1, 5));
  EXPECT_EQ(m.block_table(1).size(), 2u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(m.allocate_slots(1, 1));
  EXPECT_EQ(m.block_table(1).size(), 2u);  // 8 slots
  ASSERT_TRUE(m.allocate_slots(1, 1));
  EXPECT_EQ(m.block_table(1).size(), 3u);
  m.free(1);
  m.free(1);  // every exit path may free; the second is a no-op
  EXPECT_EQ(m.pool().num_free(), 15);
}

TEST(KVCacheManager, ExtraKeysSeparateCaches) {
  KVCacheManager m(16, kBlock);
  const std::vector<int32_t> prompt = make_tokens(9, 11);
  const std::vector<uint64_t> lora_a = {1};
  const std::vector<uint64_t> lora_b = {2};
  const ComputedBlocks miss = m.get_computed_blocks(prompt, test::hashes_of(m, prompt, lora_a));
  ASSERT_TRUE(m.allocate_slots(1, 9, miss));
  m.cache_blocks(1, prompt, 9, test::hashes_of(m, prompt, lora_a));
  EXPECT_EQ(m.get_computed_blocks(prompt, test::hashes_of(m, prompt, lora_a)).num_tokens, 8);
  EXPECT_EQ(m.get_computed_blocks(prompt, test::hashes_of(m, prompt, lora_b)).num_tokens, 0);
  EXPECT_EQ(m.get_computed_blocks(prompt, test::hashes_of(m, prompt)).num_tokens, 0);
}

TEST(KVCacheManager, DisabledPrefixCachingNeverHits) {
  KVCacheManager m(16, kBlock, /*enable_prefix_caching=*/false);
  const std::vector<int32_t> prompt = make_tokens(9, 12);
  run_prefill(m, 1, prompt);
  EXPECT_EQ(m.get_computed_blocks(prompt, test::hashes_of(m, prompt)).num_tokens, 0);
  EXPECT_EQ(m.pool().num_cached(), 0u);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Rejected speculative slots are forgotten: the blocks stay with the request, and the next
// allocation reuses them instead of growing the table past what the tokens need.
TEST(KVCacheManager, RolledBackSlotsAreReusedNotLeaked) {
  KVCacheManager m(/*num_blocks=*/16, kBlock, /*enable_prefix_caching=*/true);
  ASSERT_TRUE(m.allocate_slots(6, 5));  // 5 tokens: 2 blocks
  ASSERT_TRUE(m.allocate_slots(6, 4));  // one token plus 3 drafts: 9 slots, 3 blocks
  EXPECT_EQ(m.block_table(6).size(), 3u);
  m.rollback_slots(6, 6);               // 2 drafts rejected: 6 tokens kept
  ASSERT_TRUE(m.allocate_slots(6, 3));  // 9 slots again: still 3 blocks
  EXPECT_EQ(m.block_table(6).size(), 3u);
  ASSERT_TRUE(m.allocate_slots(6, 4));  // 13 slots: 4 blocks
  EXPECT_EQ(m.block_table(6).size(), 4u);
  m.rollback_slots(6, 100);             // never grows
  ASSERT_TRUE(m.allocate_slots(6, 3));  // 16 slots: still 4 blocks
  EXPECT_EQ(m.block_table(6).size(), 4u);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Lookahead positions get blocks but are not slots: the next allocation starts after the
// scheduled tokens, and a pool too small for the lookahead refuses the whole request.
TEST(KVCacheManager, LookaheadReservesBlocksNotSlots) {
  KVCacheManager m(/*num_blocks=*/5, kBlock, /*enable_prefix_caching=*/true);
  ASSERT_TRUE(m.allocate_slots(6, 5, {}, /*num_lookahead_tokens=*/4));  // 9 positions: 3 blocks
  EXPECT_EQ(m.block_table(6).size(), 3u);
  ASSERT_TRUE(m.allocate_slots(6, 1, {}, 2));  // slots 6, positions up to 8: still 3 blocks
  EXPECT_EQ(m.block_table(6).size(), 3u);
  EXPECT_FALSE(m.allocate_slots(6, 1, {}, 12));  // 19 positions: 5 blocks, only 4 usable
  EXPECT_EQ(m.block_table(6).size(), 3u);
  ASSERT_TRUE(m.allocate_slots(6, 1, {}, 8));  // 7 slots + 8: 4 blocks
  EXPECT_EQ(m.block_table(6).size(), 4u);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// A prefill held for a remote decoder: its blocks stay allocated (and cached) after the request
// id is gone and reused, and go back to the pool only when freed as detached.
TEST(KVCacheManager, DetachedBlocksStayAllocatedUntilFreed) {
  KVCacheManager m(16, kBlock);
  const std::vector<int32_t> a = make_tokens(10, 4);  // 3 blocks
  run_prefill(m, 1, a);
  const std::vector<BlockId> table(m.block_table(1).begin(), m.block_table(1).end());
  const int64_t free_before = m.pool().num_free();
  const auto held = m.detach(1);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0], table);
  EXPECT_TRUE(m.block_table(1).empty());
  EXPECT_EQ(m.pool().num_free(), free_before);  // nothing came back
  for (BlockId b : table) EXPECT_EQ(m.pool().ref_count(b), 1);
  // The id is free for another request; the held blocks are not handed out to it.
  ASSERT_TRUE(m.allocate_slots(1, 8));
  for (BlockId b : m.block_table(1))
    EXPECT_EQ(std::count(table.begin(), table.end(), b), 0) << "block " << b << " reused";
  // Still a prefix hit for others while held.
  EXPECT_EQ(m.get_computed_blocks(a, test::hashes_of(m, a)).num_tokens, 8);
  m.free(1);
  m.free_detached(held);
  for (BlockId b : table) EXPECT_EQ(m.pool().ref_count(b), 0);
  EXPECT_EQ(m.pool().num_free(), 15);
  EXPECT_EQ(m.pool().check_invariants(), "");
  EXPECT_TRUE(m.detach(7).empty());  // unknown ids
}

}  // namespace
}  // namespace kestrel
