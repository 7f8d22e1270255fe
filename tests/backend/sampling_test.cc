// Sampling: penalties, greedy, temperature, min-p, top-k, top-p and logprobs, checked against
// float64 references computed here from the defining formulas.
#include "backend/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "sampling_stats.h"

namespace kestrel::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
using test::chi_square;
using test::kChi2Critical;
using test::log_of;
using test::softmax;

std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

size_t argmax(const std::vector<float>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TokenLogprobs sample_copy(std::vector<float> logits, const SamplingParams& p, SamplerRng& rng) {
  return sample(logits, p, {}, {}, rng);
}

std::vector<int> histogram(const std::vector<float>& logits, const SamplingParams& p, int draws,
                           uint64_t seed) {
  SamplerRng rng{seed};
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[sample_copy(logits, p, rng).token];
  return counts;
}

std::set<int32_t> finite_ids(const std::vector<float>& logits) {
  std::set<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > kNegInf) ids.insert(static_cast<int32_t>(i));
  }
  return ids;
}

// Token ids ordered best first by probability, equal ones by id.
std::vector<int32_t> order_by_prob(const std::vector<double>& probs) {
  std::vector<int32_t> ids(probs.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  return ids;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(Sampling, GreedyPicksArgmax) {
  SamplerRng rng{1};
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto logits = random_logits(5000, seed);
    EXPECT_EQ(sample_copy(logits, greedy(), rng).token, static_cast<int32_t>(argmax(logits)));
  }
}

TEST(Sampling, GreedyTiesPickLowestId) {
  SamplerRng rng{1};
  EXPECT_EQ(sample_copy({0.5f, 2.0f, -1.0f, 2.0f, 2.0f}, greedy(), rng).token, 1);
}

TEST(Sampling, TinyTemperatureIsGreedy) {
  SamplingParams p;
  p.temperature = 1e-6f;
  const auto logits = random_logits(300, 7, 0.01f);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    SamplerRng rng{seed};
    EXPECT_EQ(sample_copy(logits, p, rng).token, static_cast<int32_t>(argmax(logits)));
  }
}

TEST(Sampling, RepetitionPenaltyMatchesFormula) {
  const std::vector<float> orig = {2.0f, -1.5f, 0.0f, 3.0f, -0.5f, 1.0f};
  std::vector<float> logits = orig;
  const std::vector<int32_t> prompt = {0, 1, 1};
  const std::vector<int32_t> output = {2, 4, 4, 4};
  SamplingParams p = greedy();
  p.repetition_penalty = 1.3f;
  SamplerRng rng{0};
  sample(logits, p, prompt, output, rng);
  const double r = 1.3;
  // Applied once per distinct token however often it occurred.
  EXPECT_FLOAT_EQ(logits[0], static_cast<float>(2.0 / r));
  EXPECT_FLOAT_EQ(logits[1], static_cast<float>(-1.5 * r));
  EXPECT_FLOAT_EQ(logits[2], 0.0f);
  EXPECT_FLOAT_EQ(logits[3], orig[3]);
  EXPECT_FLOAT_EQ(logits[4], static_cast<float>(-0.5 * r));
  EXPECT_FLOAT_EQ(logits[5], orig[5]);
}

TEST(Sampling, PresenceAndFrequencyPenaltiesUseOutputOnly) {
  const std::vector<float> orig = {2.0f, -1.5f, 0.25f, 3.0f, -0.5f, 1.0f};
  std::vector<float> logits = orig;
  const std::vector<int32_t> prompt = {0, 5, 5};
  const std::vector<int32_t> output = {3, 1, 3, 3};
  SamplingParams p = greedy();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  SamplerRng rng{0};
  sample(logits, p, prompt, output, rng);
  EXPECT_FLOAT_EQ(logits[0], orig[0]);
  EXPECT_FLOAT_EQ(logits[1], static_cast<float>(-1.5 - 1 * 0.25 - 0.5));
  EXPECT_FLOAT_EQ(logits[2], orig[2]);
  EXPECT_FLOAT_EQ(logits[3], static_cast<float>(3.0 - 3 * 0.25 - 0.5));
  EXPECT_FLOAT_EQ(logits[4], orig[4]);
  EXPECT_FLOAT_EQ(logits[5], orig[5]);
}

TEST(Sampling, AllPenaltiesTogetherAndTheyChangeGreedyChoice) {
  std::vector<float> logits = {4.0f, 3.5f, -2.0f, 1.0f};
  const std::vector<int32_t> prompt = {2};
  const std::vector<int32_t> output = {0, 0, 2};
  SamplingParams p = greedy();
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.1f;
  p.frequency_penalty = 0.2f;
  SamplerRng rng{0};
  const TokenLogprobs r = sample(logits, p, prompt, output, rng);
  // Repetition first (on the sign of the raw logit), then the output-count penalties.
  EXPECT_FLOAT_EQ(logits[0], static_cast<float>(4.0 / 1.2 - 2 * 0.2 - 0.1));
  EXPECT_FLOAT_EQ(logits[2], static_cast<float>(-2.0 * 1.2 - 1 * 0.2 - 0.1));
  EXPECT_FLOAT_EQ(logits[1], 3.5f);
  EXPECT_EQ(r.token, 1);
}

TEST(Sampling, PenaltiesIgnoreOutOfVocabIds) {
  std::vector<float> logits = {1.0f, 2.0f};
  const std::vector<int32_t> prompt = {-1, 7};
  const std::vector<int32_t> output = {2, 1000000, -5};
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  SamplerRng rng{0};
  EXPECT_EQ(sample(logits, p, prompt, output, rng).token, 1);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
}

TEST(Sampling, TopKOneEqualsGreedy) {
  SamplingParams p;
  p.top_k = 1;
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const auto logits = random_logits(2000, seed, 0.5f);
    SamplerRng rng{seed};
    EXPECT_EQ(sample_copy(logits, p, rng).token, static_cast<int32_t>(argmax(logits)));
  }
}

TEST(Sampling, TopKKeepsExactlyTheBestK) {
  for (int k : {1, 40, 2000}) {  // small k and large k take different selection paths
    const auto orig = random_logits(5000, 11);
    std::vector<float> logits = orig;
    SamplingParams p;
    p.top_k = k;
    SamplerRng rng{3};
    const int32_t token = sample(logits, p, {}, {}, rng).token;
    const auto order = order_by_prob(softmax(orig));
    const std::set<int32_t> expected(order.begin(), order.begin() + k);
    EXPECT_EQ(finite_ids(logits), expected) << "k=" << k;
    EXPECT_TRUE(expected.count(token)) << "k=" << k;
  }
}

TEST(Sampling, TopKKeepsTiesAtTheBoundary) {
  const std::vector<float> logits = {3.0f, 2.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.top_k = 2;
  std::vector<float> masked = logits;
  SamplerRng rng{5};
  sample(masked, p, {}, {}, rng);
  EXPECT_EQ(finite_ids(masked), (std::set<int32_t>{0, 1, 2}));
  const auto counts = histogram(logits, p, 3000, 9);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_EQ(counts[3] + counts[4], 0);
}

TEST(Sampling, TinyTopPKeepsOnlyTheTopToken) {
  const auto logits = random_logits(1000, 21, 0.3f);
  SamplingParams p;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    p.top_p = seed % 2 ? 1e-6f : 0.0f;
    std::vector<float> masked = logits;
    SamplerRng rng{seed};
    EXPECT_EQ(sample(masked, p, {}, {}, rng).token, static_cast<int32_t>(argmax(logits)));
    EXPECT_EQ(finite_ids(masked).size(), 1u);
  }
}

// The nucleus is the shortest best-first prefix reaching top_p, from the temperature-scaled
// softmax; a flat distribution makes it thousands of tokens long.
void expect_nucleus(const std::vector<float>& orig, float temperature, float top_p) {
  std::vector<float> logits = orig;
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  SamplerRng rng{17};
  const int32_t token = sample(logits, p, {}, {}, rng).token;
  const auto probs = softmax(orig, temperature);
  const auto order = order_by_prob(probs);
  std::set<int32_t> expected;
  double cum = 0.0;
  for (int32_t id : order) {
    expected.insert(id);
    cum += probs[id];
    if (cum >= top_p) break;
  }
  EXPECT_EQ(finite_ids(logits), expected);
  EXPECT_TRUE(expected.count(token));
}

TEST(Sampling, TopPMatchesReferenceNucleus) {
  expect_nucleus(random_logits(50000, 31, 3.0f), 0.7f, 0.9f);
  expect_nucleus(random_logits(20000, 32, 0.05f), 1.0f, 0.5f);
  expect_nucleus(random_logits(300, 33, 1.0f), 1.3f, 0.95f);
}

TEST(Sampling, TopPRenormalisesTheNucleus) {
  const auto logits = log_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  p.top_p = 0.65f;
  const auto counts = histogram(logits, p, 20000, 4);
  EXPECT_LT(chi_square(counts, {0.4 / 0.7, 0.3 / 0.7, 0.0, 0.0}), kChi2Critical[1]);
}

TEST(Sampling, MinPDropsTokensBelowFractionOfTheBest) {
  const auto logits = log_of({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.min_p = 0.2f;  // floor 0.1: only the 0.05 token goes
  std::vector<float> masked = logits;
  SamplerRng rng{1};
  sample(masked, p, {}, {}, rng);
  EXPECT_EQ(finite_ids(masked), (std::set<int32_t>{0, 1, 2}));
  const auto counts = histogram(logits, p, 20000, 8);
  EXPECT_LT(chi_square(counts, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0}), kChi2Critical[2]);
}

TEST(Sampling, MinPAboveOneStillKeepsTheBestToken) {
  std::vector<float> logits = {0.2f, 1.5f, 1.0f};
  SamplingParams p;
  p.min_p = 3.0f;
  SamplerRng rng{1};
  EXPECT_EQ(sample(logits, p, {}, {}, rng).token, 1);
  EXPECT_EQ(finite_ids(logits), (std::set<int32_t>{1}));
}

TEST(Sampling, MinPAppliesBeforeTopPAsInVllm) {
  // min-p (floor 0.16) leaves {0.4, 0.3, 0.2}, renormalised to {.444, .333, .222}; top-p 0.72 then
  // stops after two tokens. Applying top-p to the full distribution first would keep three.
  std::vector<float> logits = log_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  p.min_p = 0.4f;
  p.top_p = 0.72f;
  SamplerRng rng{2};
  sample(logits, p, {}, {}, rng);
  EXPECT_EQ(finite_ids(logits), (std::set<int32_t>{0, 1}));
}

TEST(Sampling, SeededSequencesReproduce) {
  const auto logits = random_logits(1000, 41, 1.0f);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  auto run = [&](uint64_t seed) {
    SamplerRng rng{seed};
    std::vector<int32_t> seq;
    for (int i = 0; i < 64; ++i) seq.push_back(sample_copy(logits, p, rng).token);
    return seq;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampling, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f};
  const auto counts = histogram(logits, SamplingParams{}, 20000, 123);
  EXPECT_LT(chi_square(counts, softmax(logits)), kChi2Critical[4]);
}

// Several groups of eight and a partial one, with masked tokens inside groups: the draw skips
// whole groups by their sums, so every group boundary must still give softmax frequencies.
TEST(Sampling, FrequenciesMatchSoftmaxAcrossGroups) {
  std::vector<float> logits = random_logits(21, 61, 0.5f);
  for (size_t i : {3u, 8u, 15u, 20u}) logits[i] = kNegInf;
  const auto counts = histogram(logits, SamplingParams{}, 40000, 321);
  // 17 tokens that can be drawn: 16 degrees of freedom, critical value 39.252 at 0.001.
  EXPECT_LT(chi_square(counts, softmax(logits)), 39.252);
}

TEST(Sampling, TemperatureScalesTheDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f};
  for (float t : {0.5f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    const auto counts = histogram(logits, p, 20000, 77);
    EXPECT_LT(chi_square(counts, softmax(logits, t)), kChi2Critical[4]) << "T=" << t;
    EXPECT_GT(chi_square(counts, softmax(logits)), 10 * kChi2Critical[4]) << "T=" << t;
  }
}

TEST(Sampling, LogprobsAreRawLogSoftmax) {
  const auto orig = random_logits(800, 51, 2.0f);
  std::vector<float> logits = orig;
  SamplingParams p;
  p.temperature = 0.6f;
  p.top_k = 50;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.7f;
  p.logprobs = 5;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> output = {static_cast<int32_t>(argmax(orig)), 4};
  SamplerRng rng{6};
  const TokenLogprobs r = sample(logits, p, prompt, output, rng);

  const auto probs = softmax(orig);
  EXPECT_NEAR(r.logprob, std::log(probs[r.token]), 1e-5);
  const auto order = order_by_prob(probs);
  ASSERT_EQ(r.top.size(), 5u);
  for (size_t i = 0; i < r.top.size(); ++i) {
    EXPECT_EQ(r.top[i].token, order[i]);
    EXPECT_NEAR(r.top[i].logprob, std::log(probs[order[i]]), 1e-5);
  }
}

TEST(Sampling, LogprobsZeroGivesOnlyTheChosenToken) {
  const std::vector<float> logits = {0.1f, 1.7f, -0.3f};
  SamplingParams p = greedy();
  p.logprobs = 0;
  SamplerRng rng{0};
  const TokenLogprobs r = sample_copy(logits, p, rng);
  EXPECT_EQ(r.token, 1);
  EXPECT_TRUE(r.top.empty());
  EXPECT_NEAR(r.logprob, std::log(softmax(logits)[1]), 1e-6);
}

TEST(Sampling, LogprobsWiderThanVocabListEveryToken) {
  const std::vector<float> logits = {0.1f, 1.7f, -0.3f};
  SamplingParams p = greedy();
  p.logprobs = 20;
  SamplerRng rng{0};
  const TokenLogprobs r = sample_copy(logits, p, rng);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 0);
  EXPECT_EQ(r.top[2].token, 2);
}

TEST(Sampling, NanLogitsAreNeverSampled) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.0f, nan, 0.5f};
  const auto counts = histogram(logits, SamplingParams{}, 2000, 3);
  EXPECT_EQ(counts[0] + counts[2], 0);
  SamplerRng rng{0};
  EXPECT_EQ(sample_copy(logits, greedy(), rng).token, 3);
}

}  // namespace
}  // namespace kestrel::cpu
