// Randomized model check of KVCacheManager: a small pool, requests that share random prefixes,
// chunked prefill, decode growth, preemption and aborts. A shadow copy of every block's token
// contents stands in for the real KV: a prefix hit must return blocks that hold exactly the
// request's tokens, and a block is only written while its one owner holds it uncached.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_test_hashes.h"

namespace kestrel {
namespace {

constexpr int32_t kBlock = 4;
constexpr int32_t kNumBlocks = 41;

struct Live {
  RequestHandle id;
  std::vector<int32_t> tokens;  // prompt plus generated tokens
  int64_t num_computed = 0;
};

class StressTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  int rand_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = rand_int(1, 50000);
    return t;
  }

  // Writes tokens [r.num_computed, r.num_computed + n) into the shadow KV, then publishes them.
  void compute(Live& r, int64_t n) {
    const auto table = manager_.block_table(r.id);
    for (int64_t pos = r.num_computed; pos < r.num_computed + n; ++pos) {
      const BlockId b = table[pos / kBlock];
      ASSERT_EQ(manager_.pool().ref_count(b), 1) << "writing into a shared block " << b;
      ASSERT_FALSE(manager_.pool().is_cached(b)) << "writing into a cached block " << b;
      shadow_[b * kBlock + pos % kBlock] = r.tokens[pos];
    }
    r.num_computed += n;
    manager_.cache_blocks(r.id, r.tokens, r.num_computed, test::hashes_of(manager_, r.tokens));
  }

  void check_state() {
    ASSERT_EQ(manager_.pool().check_invariants(), "");
    std::set<BlockId> held;
    for (const Live& r : live_) {
      const auto table = manager_.block_table(r.id);
      ASSERT_EQ(table.size(),
                static_cast<size_t>((manager_.num_slots(r.id) + kBlock - 1) / kBlock));
      for (BlockId b : table) {
        ASSERT_NE(b, kNullBlock);
        ASSERT_GT(manager_.pool().ref_count(b), 0);
        held.insert(b);
      }
    }
    ASSERT_EQ(manager_.num_requests(), live_.size());
    ASSERT_EQ(static_cast<size_t>(manager_.pool().num_free()) + held.size(), kNumBlocks - 1u);
  }

  void admit() {
    Live r;
    r.id = RequestHandle(1000 + next_id_++);
    r.tokens = prefixes_[rand_int(0, static_cast<int>(prefixes_.size()) - 1)];
    const std::vector<int32_t> suffix = random_tokens(rand_int(1, 20));
    r.tokens.insert(r.tokens.end(), suffix.begin(), suffix.end());

    const int64_t hits_before = manager_.prefix_cache_hits();
    const int64_t queries_before = manager_.prefix_cache_queries();
    const ComputedBlocks hit =
        manager_.get_computed_blocks(r.tokens, test::hashes_of(manager_, r.tokens));
    ASSERT_LT(hit.num_tokens, static_cast<int64_t>(r.tokens.size()));
    ASSERT_EQ(hit.num_tokens, static_cast<int64_t>(hit.blocks[0].size()) * kBlock);
    for (size_t i = 0; i < hit.blocks[0].size(); ++i) {
      for (int j = 0; j < kBlock; ++j) {
        ASSERT_EQ(shadow_[hit.blocks[0][i] * kBlock + j], r.tokens[i * kBlock + j])
            << "prefix hit on block " << hit.blocks[0][i] << " with stale contents";
      }
    }
    const int64_t remaining = static_cast<int64_t>(r.tokens.size()) - hit.num_tokens;
    const int64_t chunk = rand_int(1, static_cast<int>(remaining));
    const int32_t free_before = manager_.pool().num_free();
    if (!manager_.allocate_slots(r.id, chunk, hit)) {
      ++failed_allocations_;
      ASSERT_EQ(manager_.pool().num_free(), free_before);
      ASSERT_TRUE(manager_.block_table(r.id).empty());
      // A refused admission counts no lookup.
      ASSERT_EQ(manager_.prefix_cache_hits(), hits_before);
      ASSERT_EQ(manager_.prefix_cache_queries(), queries_before);
      return;
    }
    total_hit_tokens_ += hit.num_tokens;
    ASSERT_EQ(manager_.prefix_cache_hits() - hits_before, hit.num_tokens);
    ASSERT_EQ(manager_.prefix_cache_queries() - queries_before,
              static_cast<int64_t>(r.tokens.size()));
    r.num_computed = hit.num_tokens;
    live_.push_back(r);
    compute(live_.back(), chunk);
  }

  void step(size_t index) {
    Live& r = live_[index];
    int64_t chunk = 1;
    const int64_t remaining = static_cast<int64_t>(r.tokens.size()) - r.num_computed;
    if (remaining > 0) {
      chunk = rand_int(1, static_cast<int>(remaining));
    } else {
      r.tokens.push_back(rand_int(1, 50000));  // a sampled token, computed next step
    }
    const size_t table_before = manager_.block_table(r.id).size();
    const int32_t free_before = manager_.pool().num_free();
    if (!manager_.allocate_slots(r.id, chunk)) {
      ++failed_allocations_;
      ASSERT_EQ(manager_.block_table(r.id).size(), table_before);
      ASSERT_EQ(manager_.pool().num_free(), free_before);
      if (rand_int(0, 1) == 0) drop(index);  // preempted: blocks back, recomputed later
      return;
    }
    compute(r, chunk);
  }

  void drop(size_t index) {
    manager_.free(live_[index].id);
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  std::mt19937_64 rng_{GetParam()};
  KVCacheManager manager_{kNumBlocks, kBlock};
  std::vector<int32_t> shadow_ = std::vector<int32_t>(kNumBlocks * kBlock, -1);
  std::vector<std::vector<int32_t>> prefixes_;
  std::vector<Live> live_;
  int next_id_ = 0;
  int failed_allocations_ = 0;
  int64_t total_hit_tokens_ = 0;
};

TEST_P(StressTest, RandomWorkloadKeepsInvariants) {
  for (int i = 0; i < 6; ++i) prefixes_.push_back(random_tokens(rand_int(0, 30)));
  for (int op = 0; op < 20000; ++op) {
    const int what = rand_int(0, 9);
    if (live_.empty() || (what < 3 && live_.size() < 10)) {
      admit();
    } else if (what < 8) {
      step(rand_int(0, static_cast<int>(live_.size()) - 1));
    } else {
      drop(rand_int(0, static_cast<int>(live_.size()) - 1));  // finished or aborted
    }
    if (HasFatalFailure()) FAIL() << "at operation " << op;
    check_state();
    if (HasFatalFailure()) FAIL() << "at operation " << op;
  }
  while (!live_.empty()) drop(live_.size() - 1);
  EXPECT_EQ(manager_.pool().check_invariants(), "");
  EXPECT_EQ(manager_.pool().num_free(), kNumBlocks - 1);
  // The workload must have exercised both the hit path and the out-of-blocks path.
  EXPECT_GT(failed_allocations_, 100);
  EXPECT_GT(total_hit_tokens_, 1000);
  EXPECT_EQ(manager_.prefix_cache_hits(), total_hit_tokens_);
}

INSTANTIATE_TEST_SUITE_P(Seeds, StressTest, ::testing::Values(20261130u, 7u, 99991u));

}  // namespace
}  // namespace kestrel
