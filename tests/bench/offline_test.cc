// The offline benchmarks' pieces: random prompts with exact lengths, vLLM's range-ratio rule and
// shared prefixes; numpy-style percentiles; run_batch on a fixture model.
#include "bench/offline.h"

#include <gtest/gtest.h>

#include <set>

#include "engine/local_engine.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel::bench {
namespace {

TEST(RandomPrompts, ExactLengthsAndOnlyAllowedIds) {
  RandomPromptSpec s;
  s.num_prompts = 50;
  s.input_len = 37;
  s.output_len = 11;
  s.vocab_size = 100;
  for (int32_t id = 0; id < 100; id += 2) s.excluded_ids.push_back(id);  // only odd ids allowed
  auto p = random_prompts(s);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->size(), 50u);
  std::set<std::vector<int32_t>> distinct;
  for (const BenchPrompt& b : *p) {
    ASSERT_EQ(b.token_ids.size(), 37u);
    EXPECT_EQ(b.output_len, 11);
    for (int32_t t : b.token_ids) {
      EXPECT_EQ(t % 2, 1) << "excluded id drawn";
      EXPECT_LT(t, 100);
    }
    distinct.insert(b.token_ids);
  }
  EXPECT_EQ(distinct.size(), 50u);
}

TEST(RandomPrompts, RangeRatioSpreadsLengthsWithinBounds) {
  RandomPromptSpec s;
  s.num_prompts = 400;
  s.input_len = 100;
  s.output_len = 20;
  s.range_ratio = 0.5;
  s.vocab_size = 1000;
  auto p = random_prompts(s);
  ASSERT_TRUE(p.ok());
  std::set<size_t> lengths;
  for (const BenchPrompt& b : *p) {
    EXPECT_GE(b.token_ids.size(), 50u);
    EXPECT_LE(b.token_ids.size(), 150u);
    EXPECT_GE(b.output_len, 10);
    EXPECT_LE(b.output_len, 30);
    lengths.insert(b.token_ids.size());
  }
  EXPECT_GT(lengths.size(), 50u) << "lengths should spread over the range";
}

TEST(RandomPrompts, SharedPrefixAndDeterminism) {
  RandomPromptSpec s;
  s.num_prompts = 5;
  s.input_len = 8;
  s.prefix_len = 20;
  s.vocab_size = 5000;
  s.seed = 7;
  auto a = random_prompts(s), b = random_prompts(s);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_EQ((*a)[i].token_ids.size(), 28u);
    EXPECT_TRUE(std::equal((*a)[0].token_ids.begin(), (*a)[0].token_ids.begin() + 20,
                           (*a)[i].token_ids.begin()));
    EXPECT_EQ((*a)[i].token_ids, (*b)[i].token_ids);
  }
  EXPECT_NE((*a)[0].token_ids, (*a)[1].token_ids);
  s.seed = 8;
  EXPECT_NE(random_prompts(s)->at(0).token_ids, (*a)[0].token_ids);
}

TEST(RandomPrompts, RejectsBadSpecs) {
  RandomPromptSpec s;
  s.vocab_size = 10;
  s.num_prompts = 0;
  EXPECT_FALSE(random_prompts(s).ok());
  s.num_prompts = 1;
  s.range_ratio = 1.0;
  EXPECT_FALSE(random_prompts(s).ok());
  s.range_ratio = 0.0;
  for (int32_t i = 0; i < 10; ++i) s.excluded_ids.push_back(i);
  EXPECT_FALSE(random_prompts(s).ok());
}

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], q) for q = 0, 10, 50, 99, 100: 1, 1.3, 2.5, 3.97, 4.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_NEAR(percentile(v, 10), 1.3, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({5.0}, 90), 5.0);
}

TEST(RunBatch, CountsTokensAndPrefixHits) {
  LoadOptions o;
  o.model = test::fixtures_dir() + "/models/llama3_f32";
  o.threads = 1;
  auto lm = load_model(o);
  ASSERT_TRUE(lm.ok()) << lm.error().message;
  EngineClientOptions opts;
  opts.scheduler.block_size = 16;
  opts.scheduler.num_blocks = 128;
  opts.scheduler.max_model_len = 256;
  const auto client_owner = build_local_engine(*(*lm)->model, nullptr, std::move(opts));
  EngineClient& client = *client_owner;
  RandomPromptSpec s;
  s.num_prompts = 10;
  s.input_len = 5;
  s.prefix_len = 64;  // four full blocks shared
  s.output_len = 6;
  s.vocab_size = 512;
  auto prompts = random_prompts(s);
  ASSERT_TRUE(prompts.ok());
  BenchSampling sampling;
  sampling.detokenize = false;
  auto r = run_batch(client, *prompts, sampling, "b");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->num_requests, 10);
  EXPECT_EQ(r->prompt_tokens, 10 * 69);
  EXPECT_EQ(r->output_tokens, 10 * 6);
  EXPECT_GT(r->elapsed_s, 0.0);
  // The first request's prefix blocks are published when scheduled, so the other nine share them
  // within the same step; a second batch hits for all ten.
  EXPECT_EQ(r->cached_tokens, 9 * 64);
  auto again = run_batch(client, *prompts, sampling, "c");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cached_tokens, 10 * 64);
  // The ids of a finished batch are free to reuse; text needs a tokenizer this client lacks.
  sampling.detokenize = true;
  EXPECT_FALSE(run_batch(client, *prompts, sampling, "b").ok());
}

}  // namespace
}  // namespace kestrel::bench
