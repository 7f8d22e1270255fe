// Multi-token steps: the runner verifies a request's draft tokens in the same forward pass as
// its last token. Whatever the drafts (all right, all wrong, right then wrong), a request emits
// exactly the tokens and logprobs that decoding without drafts gives for the same seed, while
// right drafts cut the number of steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runner/runner_driver.h"

namespace kestrel {
namespace {

using test::DriverRun;
using test::RunnerDriver;

const std::vector<int32_t> kPrompt = {5, 77, 301, 42, 9, 250, 13, 400, 88, 17, 3};
const std::vector<int32_t> kOther = {460, 211, 99, 8};
constexpr int64_t kMaxTokens = 20;
constexpr size_t kDrafts = 3;

SchedulerConfig config() {
  SchedulerConfig c;
  c.block_size = 4;  // drafts cross block boundaries
  c.num_blocks = 64;
  c.max_model_len = 64;
  return c;
}

RequestSpec spec(RequestHandle id, const std::vector<int32_t>& prompt, const SamplingParams& p,
                 uint64_t seed) {
  RequestSpec s = test::sampled_spec(id, prompt, kMaxTokens, seed);
  s.sampling.params = p;
  return s;
}

DriverRun run(LoadedModel& lm, const SamplingParams& p, const test::DraftProposer& propose) {
  RunnerDriver d(lm, config());
  EXPECT_TRUE(d.sched.add_request(spec(1, kPrompt, p, 11)).ok());
  EXPECT_TRUE(d.sched.add_request(spec(2, kOther, p, 12)).ok());
  return d.run(propose);
}

// Proposes from a known continuation `want` (per request), perturbed by `wrong_from`: drafts at
// or after that index are off by one.
test::DraftProposer from(const std::map<RequestHandle, std::vector<int32_t>>& want,
                         size_t wrong_from, int64_t vocab) {
  return [&want, wrong_from, vocab](const Request& req) {
    const std::vector<int32_t>& w = want.at(req.id);
    std::vector<int32_t> drafts;
    for (size_t i = 0; i < kDrafts; ++i) {
      const size_t n = size_t(req.num_output_tokens()) + i;
      if (n >= w.size()) break;
      drafts.push_back(i >= wrong_from ? int32_t((w[n] + 1) % vocab) : w[n]);
    }
    return drafts;
  };
}

void expect_same_logprobs(const DriverRun& got, const DriverRun& want) {
  for (const auto& [id, lps] : want.logprobs) {
    const std::vector<TokenLogprobs>& g = got.logprobs.at(id);
    ASSERT_GE(g.size(), lps.size()) << id;
    for (size_t i = 0; i < lps.size(); ++i) {
      EXPECT_EQ(g[i].token, lps[i].token) << id << " " << i;
      // The same logits, computed in a wider batch: equal up to f32 rounding.
      EXPECT_NEAR(g[i].logprob, lps[i].logprob, 1e-4f) << id << " " << i;
      ASSERT_EQ(g[i].top.size(), lps[i].top.size());
    }
  }
}

class DraftVerification : public ::testing::TestWithParam<int> {};

SamplingParams params_for(int kind) {
  SamplingParams p;
  p.logprobs = 2;
  if (kind == 0) p.temperature = 0.0f;  // greedy
  if (kind == 1) p.temperature = 1.0f;  // seeded sampling
  if (kind == 2) {                      // penalties see the accepted drafts as outputs
    p.temperature = 0.7f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.4f;
    p.top_k = 50;
  }
  return p;
}

TEST_P(DraftVerification, OutputsDoNotDependOnTheDrafts) {
  auto lm = test::load_llama_fixture();
  ASSERT_TRUE(lm);
  const int64_t vocab = lm->config.vocab_size;
  const SamplingParams p = params_for(GetParam());
  const DriverRun plain = run(*lm, p, nullptr);
  ASSERT_EQ(plain.outputs.at(1).size(), size_t(kMaxTokens));
  EXPECT_EQ(*std::max_element(plain.tokens_per_step.begin(), plain.tokens_per_step.end()), 1u);

  const DriverRun right = run(*lm, p, from(plain.outputs, kDrafts, vocab));
  EXPECT_EQ(right.outputs, plain.outputs);
  expect_same_logprobs(right, plain);
  EXPECT_EQ(right.rejected_drafts, 0u);
  EXPECT_EQ(*std::max_element(right.tokens_per_step.begin(), right.tokens_per_step.end()),
            kDrafts + 1);
  EXPECT_LT(right.tokens_per_step.size(), plain.tokens_per_step.size());

  const DriverRun wrong = run(*lm, p, from(plain.outputs, 0, vocab));
  EXPECT_EQ(wrong.outputs, plain.outputs);
  expect_same_logprobs(wrong, plain);
  EXPECT_GT(wrong.rejected_drafts, 0u);
  EXPECT_EQ(*std::max_element(wrong.tokens_per_step.begin(), wrong.tokens_per_step.end()), 1u);

  const DriverRun mixed = run(*lm, p, from(plain.outputs, 1, vocab));
  EXPECT_EQ(mixed.outputs, plain.outputs);
  expect_same_logprobs(mixed, plain);
  EXPECT_GT(mixed.rejected_drafts, 0u);
  EXPECT_EQ(*std::max_element(mixed.tokens_per_step.begin(), mixed.tokens_per_step.end()), 2u);
}

INSTANTIATE_TEST_SUITE_P(Sampling, DraftVerification, ::testing::Values(0, 1, 2));

}  // namespace
}  // namespace kestrel
