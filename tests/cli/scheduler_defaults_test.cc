// The scheduler limits `kestrel serve` and `kestrel bench` derive from their flags and the model.
#include <gtest/gtest.h>

#include "cli/engine_args.h"
#include "model/config.h"

namespace kestrel::cli {
namespace {

ModelConfig model_with_context(int64_t positions) {
  ModelConfig m;
  m.max_position_embeddings = positions;
  return m;
}

TEST(SchedulerDefaults, ChunkedPrefillBudgetIs512OrMaxNumSeqs) {
  EngineConfig a;
  a.max_num_seqs = 16;
  auto c = scheduler_config(a, model_with_context(8192));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_num_batched_tokens, 512);
  // Every running decode must fit one step.
  a.max_num_seqs = 1024;
  c = scheduler_config(a, model_with_context(8192));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_num_batched_tokens, 1024);
}

TEST(SchedulerDefaults, WithoutChunkedPrefillAStepHoldsAWholePrompt) {
  EngineConfig a;
  a.enable_chunked_prefill = false;
  auto c = scheduler_config(a, model_with_context(8192));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_num_batched_tokens, 8192);
  c = scheduler_config(a, model_with_context(1024));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_num_batched_tokens, 2048);
}

TEST(SchedulerDefaults, AnExplicitBudgetWins) {
  EngineConfig a;
  a.max_num_batched_tokens = 96;
  auto c = scheduler_config(a, model_with_context(8192));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_num_batched_tokens, 96);
}

}  // namespace
}  // namespace kestrel::cli
