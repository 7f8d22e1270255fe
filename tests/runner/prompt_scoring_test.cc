// prompt_logprobs on a prompt far longer than one scoring chunk: every prompt token is scored
// exactly as from the logits of one whole forward pass, and the runner's logits memory stays
// at one chunk of rows plus the sampled rows, however many prompt tokens the step computes.
#include <gtest/gtest.h>

#include <unordered_map>

#include "backend/cpu/sampling.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "test_paths.h"

namespace kestrel {
namespace {

TEST(PromptScoring, LongPromptIsScoredInBoundedChunks) {
  LoadOptions o;
  o.model = test::fixtures_dir() + "/models/llama3_f32";
  o.threads = 2;
  auto lm = load_model(o);
  ASSERT_TRUE(lm.ok()) << lm.error().message;
  CausalLM& model = *(*lm)->model;
  const int64_t vocab = model.config().vocab_size;

  SchedulerConfig c;
  c.block_size = 16;
  c.num_blocks = 64;
  c.max_model_len = 512;
  c.max_num_batched_tokens = 512;
  std::vector<int32_t> prompt(300);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % vocab);

  Scheduler sched(c);
  ModelRunner runner(model, model.make_kv_cache(c.num_blocks, c.block_size));
  RequestSpec spec;
  spec.id = 1;
  spec.prompt = prompt;
  spec.max_tokens = 1;
  spec.read_prefix_cache = false;
  spec.sampling.params.temperature = 0.0f;
  spec.sampling.prompt_logprobs = 3;
  ASSERT_TRUE(sched.add_request(spec).ok());
  const SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  ASSERT_EQ(out.scheduled[0].num_tokens, int64_t(prompt.size()));  // one step, all of it
  auto step = runner.execute(out);
  ASSERT_TRUE(step.ok()) << step.error().message;
  ASSERT_EQ(step->prompt_logprobs.size(), 1u);
  EXPECT_EQ(step->prompt_logprobs[0].first, 1);
  const std::vector<TokenLogprobs>& scored = step->prompt_logprobs[0].second;
  ASSERT_EQ(scored.size(), prompt.size() - 1);
  EXPECT_LE(runner.logits_bytes(),
            size_t(ModelRunner::kScoreChunkRows + 1) * size_t(vocab) * sizeof(float));

  // The reference: one forward pass with every row's logits, into a fresh cache.
  KVCacheStorage kv = model.make_kv_cache(c.num_blocks, c.block_size);
  BatchBuilder builder(c.block_size);
  std::vector<int32_t> table;
  for (int32_t b = 0; b < int32_t((prompt.size() + 15) / 16); ++b) table.push_back(b + 1);
  builder.add(prompt, 0, table, BatchBuilder::Logits::kAll);
  std::vector<float> logits(prompt.size() * size_t(vocab));
  model.forward(builder.batch(), kv, logits.data());
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const TokenLogprobs want = cpu::score_token(
        std::span<const float>(logits.data() + i * size_t(vocab), size_t(vocab)), prompt[i + 1], 3);
    ASSERT_EQ(scored[i].token, want.token) << i;
    EXPECT_FLOAT_EQ(scored[i].logprob, want.logprob) << i;
    EXPECT_EQ(scored[i].rank, want.rank) << i;
    ASSERT_EQ(scored[i].top.size(), want.top.size()) << i;
    for (size_t k = 0; k < want.top.size(); ++k) {
      EXPECT_EQ(scored[i].top[k].token, want.top[k].token) << i << " " << k;
      EXPECT_FLOAT_EQ(scored[i].top[k].logprob, want.top[k].logprob) << i << " " << k;
    }
  }
}

}  // namespace
}  // namespace kestrel
