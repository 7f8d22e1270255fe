// Tensor-parallel shards: every head, KV head, feature and vocabulary row belongs to exactly the
// ranks it should (once, or replicated with its KV group), uneven splits stay as even as the
// structure allows, and counts that cannot be split are refused with the reason.
#include "model/tp_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace kestrel {
namespace {

ModelConfig gqa(int64_t heads, int64_t kv, int64_t inter, int64_t vocab) {
  ModelConfig c;
  c.hidden_size = heads * 64;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  return c;
}

TEST(TpPlan, SplitRangeCoversEverythingOnceAndEvenly) {
  for (int64_t n : {1, 5, 31, 32, 33, 768, 1536, 49152, 100003})
    for (int size : {1, 2, 3, 4, 8})
      for (int64_t align : {1, 32}) {
        int64_t next = 0, smallest = n, largest = 0;
        for (int r = 0; r < size; ++r) {
          const IndexRange p = split_range(n, r, size, align);
          EXPECT_EQ(p.begin, next) << n << "/" << size << "/" << align;
          EXPECT_LE(p.begin, p.end);
          if (p.end < n) {
            EXPECT_EQ(p.size() % align, 0);
          }
          next = p.end;
          smallest = std::min(smallest, p.size());
          largest = std::max(largest, p.size());
        }
        EXPECT_EQ(next, n);
        // One unit more on the first parts, and a partial unit on the last one.
        if (n >= size * align) {
          EXPECT_LE(largest - smallest, n % align == 0 ? align : 2 * align) << n << "/" << size;
        }
      }
}

// Each query head on exactly one rank, which also holds the KV head of its group.
void expect_heads_partitioned(const ModelConfig& c, int size) {
  const int64_t group = c.num_attention_heads / c.num_key_value_heads;
  std::vector<int> owners(size_t(c.num_attention_heads), 0);
  for (int r = 0; r < size; ++r) {
    auto s = plan_tp_shard(c, r, size);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_GT(s->q_heads.size(), 0);
    for (int64_t h = s->q_heads.begin; h < s->q_heads.end; ++h) {
      ++owners[size_t(h)];
      EXPECT_GE(h / group, s->kv_heads.begin);
      EXPECT_LT(h / group, s->kv_heads.end);
    }
  }
  for (int n : owners) EXPECT_EQ(n, 1);
}

TEST(TpPlan, SmolLM2OnTwoRanksSplitsWholeKvGroups) {
  const ModelConfig c = gqa(9, 3, 1536, 49152);
  auto r0 = plan_tp_shard(c, 0, 2), r1 = plan_tp_shard(c, 1, 2);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0->q_heads, (IndexRange{0, 6}));
  EXPECT_EQ(r0->kv_heads, (IndexRange{0, 2}));
  EXPECT_EQ(r1->q_heads, (IndexRange{6, 9}));
  EXPECT_EQ(r1->kv_heads, (IndexRange{2, 3}));
  EXPECT_EQ(r0->intermediate, (IndexRange{0, 768}));
  EXPECT_EQ(r1->intermediate, (IndexRange{768, 1536}));
  EXPECT_EQ(r0->hidden, (IndexRange{0, 288}));  // 576 = 36 panels of 16: 18 each
  EXPECT_EQ(r1->hidden, (IndexRange{288, 576}));
  EXPECT_EQ(r0->vocab, (IndexRange{0, 24576}));
  EXPECT_EQ(r1->vocab, (IndexRange{24576, 49152}));
  expect_heads_partitioned(c, 2);
  expect_heads_partitioned(c, 3);
}

TEST(TpPlan, FewerKvHeadsThanRanksReplicatesEachOne) {
  const ModelConfig c = gqa(8, 2, 512, 512);
  std::vector<IndexRange> q, kv;
  for (int r = 0; r < 4; ++r) {
    auto s = plan_tp_shard(c, r, 4);
    ASSERT_TRUE(s.ok()) << s.error().message;
    q.push_back(s->q_heads);
    kv.push_back(s->kv_heads);
  }
  EXPECT_EQ(q, (std::vector<IndexRange>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(kv, (std::vector<IndexRange>{{0, 1}, {0, 1}, {1, 2}, {1, 2}}));
  expect_heads_partitioned(c, 4);
  expect_heads_partitioned(c, 8);
}

TEST(TpPlan, MlaKeepsTheLatentCacheOnEveryRank) {
  ModelConfig c = gqa(16, 16, 0, 512);
  c.mla.kv_lora_rank = 64;
  c.moe.moe_intermediate_size = 256;
  c.moe.num_shared_experts = 2;  // one MLP of 512 features
  for (int r = 0; r < 4; ++r) {
    auto s = plan_tp_shard(c, r, 4);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->kv_heads, (IndexRange{0, 1}));
    EXPECT_EQ(s->q_heads, (IndexRange{4 * r, 4 * r + 4}));
    EXPECT_EQ(s->intermediate, IndexRange{});
    EXPECT_EQ(s->moe_intermediate, (IndexRange{64 * r, 64 * r + 64}));
    EXPECT_EQ(s->shared_intermediate, (IndexRange{128 * r, 128 * r + 128}));
  }
  // 48 expert features are three panels of 16: a fourth rank would get none, so every rank
  // holds every expert whole.
  c.moe.moe_intermediate_size = 48;
  for (int r = 0; r < 4; ++r) {
    auto s = plan_tp_shard(c, r, 4);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->moe_intermediate, (IndexRange{0, 48}));
  }
  // Expert parallelism: whole experts, two of the eight per rank.
  c.moe.num_experts = 8;
  auto ep = plan_tp_shard(c, 3, 4, /*expert_parallel=*/true);
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  EXPECT_EQ(ep->experts, (IndexRange{6, 8}));
  EXPECT_EQ(ep->moe_intermediate, IndexRange{});
  // More ranks than experts: the last ranks hold none (they still take part in the exchange).
  c.moe.num_experts = 3;
  auto none = plan_tp_shard(c, 3, 4, true);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->whole_experts);
  EXPECT_EQ(none->experts.size(), 0);
  EXPECT_EQ(plan_tp_shard(c, 0, 4, true)->experts, (IndexRange{0, 1}));
  // Across data-parallel ranks: rank (dp, tp) takes part tp * dp_size + dp of the experts, so
  // each TP index's experts are contiguous over the data-parallel ranks.
  c.moe.num_experts = 8;
  for (int t = 0; t < 2; ++t)
    for (int d = 0; d < 2; ++d) {
      auto s = plan_tp_shard(c, t, 2, true, DataParallelPlace{d, 2});
      ASSERT_TRUE(s.ok()) << s.error().message;
      EXPECT_EQ(s->experts, (IndexRange{4 * t + 2 * d, 4 * t + 2 * d + 2}));
      EXPECT_EQ(s->dp, (DataParallelPlace{d, 2}));
    }
  EXPECT_EQ(tp_index_experts(8, 1, 2, 2), (IndexRange{4, 8}));
  EXPECT_EQ(tp_index_experts(3, 1, 2, 2), (IndexRange{2, 3}));
  EXPECT_FALSE(plan_tp_shard(c, 0, 2, true, DataParallelPlace{2, 2}).ok());
}

// Qwen3.5-397B's Gated DeltaNet (16 key heads of 4 value heads of 128) over 8 ranks, and an
// uneven split of 3 key heads over 2; its gated shared expert splits like a dense MLP.
TEST(TpPlan, LinearAttentionKeyHeadsGoWholeWithTheirValueHeads) {
  ModelConfig c = gqa(32, 2, 0, 512);
  c.linear.num_key_heads = 16;
  c.linear.num_value_heads = 64;
  c.linear.key_head_dim = c.linear.value_head_dim = 128;
  c.moe.moe_intermediate_size = 1024;
  c.moe.shared_expert_intermediate_size = 1024;
  for (int r = 0; r < 8; ++r) {
    auto s = plan_tp_shard(c, r, 8);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->linear_key_heads, (IndexRange{2 * r, 2 * r + 2}));
    EXPECT_EQ(s->linear_value, (IndexRange{1024 * r, 1024 * r + 1024}));
    EXPECT_EQ(s->shared_intermediate, (IndexRange{128 * r, 128 * r + 128}));
  }
  c.linear.num_key_heads = 3;
  c.linear.num_value_heads = 6;
  auto first = plan_tp_shard(c, 0, 2), second = plan_tp_shard(c, 1, 2);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->linear_key_heads, (IndexRange{0, 2}));
  EXPECT_EQ(second->linear_key_heads, (IndexRange{2, 3}));
  EXPECT_EQ(second->linear_value, (IndexRange{512, 768}));
  auto too_many = plan_tp_shard(c, 0, 4);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("only 3 key heads"), std::string::npos);
}

TEST(TpPlan, SplitsThatCannotWorkAreRefusedWithTheReason) {
  auto more_ranks_than_heads = plan_tp_shard(gqa(2, 2, 1024, 512), 0, 4);
  ASSERT_FALSE(more_ranks_than_heads.ok());
  EXPECT_NE(more_ranks_than_heads.error().message.find("only 2 attention heads"),
            std::string::npos);
  auto uneven_replication = plan_tp_shard(gqa(12, 2, 1024, 512), 0, 3);
  ASSERT_FALSE(uneven_replication.ok());
  EXPECT_NE(uneven_replication.error().message.find("cannot be replicated evenly"),
            std::string::npos);
  auto narrow_mlp = plan_tp_shard(gqa(8, 8, 48, 512), 0, 4);
  ASSERT_TRUE(narrow_mlp.ok());
  EXPECT_EQ(narrow_mlp->intermediate, (IndexRange{0, 48}));  // replicated
  ModelConfig narrow = gqa(8, 8, 1024, 512);
  narrow.hidden_size = 48;
  auto few_hidden = plan_tp_shard(narrow, 0, 4);
  ASSERT_FALSE(few_hidden.ok());
  EXPECT_NE(few_hidden.error().message.find("the hidden state has 48 features"), std::string::npos)
      << few_hidden.error().message;
  // An FP8 checkpoint's shards hold whole 128-row scale blocks.
  ModelConfig fp8 = gqa(8, 8, 256, 512);
  fp8.fp8.enabled = true;
  fp8.fp8.block_rows = 128;
  auto fp8_three = plan_tp_shard(fp8, 0, 3);
  ASSERT_TRUE(fp8_three.ok()) << fp8_three.error().message;
  EXPECT_EQ(fp8_three->intermediate, (IndexRange{0, 256}));  // two blocks for three ranks
  auto fp8_two = plan_tp_shard(fp8, 1, 2);
  ASSERT_TRUE(fp8_two.ok()) << fp8_two.error().message;
  EXPECT_EQ(fp8_two->intermediate, (IndexRange{128, 256}));
  EXPECT_FALSE(plan_tp_shard(gqa(8, 8, 1024, 512), 4, 4).ok());
}

}  // namespace
}  // namespace kestrel
