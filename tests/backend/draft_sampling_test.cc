// Draft verification in the batched sampling op (Backend::sample, backend/ops.h SampleGroup):
// with a point-mass draft, exact rejection sampling emits tokens distributed exactly as the
// target, so over many independent draws token 0 ~ p0 whatever the draft, token 1 ~ p1 given
// token 0 == draft 0, and so on, and a group emits 1 + its accepted drafts. Checked with
// Pearson chi-square at significance 0.001 against float64 softmax references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/ops.h"
#include "sampling_stats.h"

namespace kestrel {
namespace {

using test::chi_square;
using test::kChi2Critical;
using test::log_of;
using test::softmax;
constexpr int kDraws = 20000;

// The critical value for the tokens `expected` allows.
double critical(const std::vector<double>& expected) {
  const auto support =
      std::count_if(expected.begin(), expected.end(), [](double p) { return p > 0; });
  return kChi2Critical[support - 1];
}

// The distribution of a sampler that skipped the recovered-token step: on a rejection of
// `draft` it draws afresh from p, which may give the draft again, so the draft comes out with
// probability p_d + (1 - p_d) p_d and every other token with (1 - p_d) p_j. Against p its
// Pearson statistic over N draws is about N · p_d (1 - p_d) + (degrees of freedom).
std::vector<double> redraw_on_rejection(std::vector<double> p, int32_t draft) {
  const double pd = p[size_t(draft)];
  for (double& x : p) x *= 1.0 - pd;
  p[size_t(draft)] = pd + (1.0 - pd) * pd;
  return p;
}

struct Draw {
  std::vector<int32_t> tokens;
  uint64_t rng_draws = 0;  // numbers the group took from its generator
};

struct Request {
  std::vector<float> rows;  // (drafts + 1) rows of vocab
  int64_t vocab = 0;
  std::vector<int32_t> drafts;
  SamplingParams params;
  std::vector<int32_t> prompt, outputs;
};

// `n` independent draws of `q`, each with its own generator seeded from `seed`, in batches of
// groups per Backend::sample call.
std::vector<Draw> draw(Backend& backend, const Request& q, int n, uint64_t seed) {
  std::mt19937_64 seeds(seed);
  std::vector<Draw> all;
  constexpr int kBatch = 1000;
  for (int start = 0; start < n; start += kBatch) {
    const int count = std::min(kBatch, n - start);
    std::vector<std::vector<float>> logits(static_cast<size_t>(count), q.rows);
    std::vector<SamplerRng> rngs;
    for (int i = 0; i < count; ++i) rngs.push_back(SamplerRng{seeds(), 0});
    std::vector<SampleGroup> groups(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      SampleGroup& g = groups[size_t(i)];
      g.logits = logits[size_t(i)].data();
      g.vocab = q.vocab;
      g.drafts = q.drafts;
      g.params = &q.params;
      g.prompt = q.prompt;
      g.outputs = q.outputs;
      g.rng = &rngs[size_t(i)];
    }
    std::vector<GroupSamples> out(static_cast<size_t>(count));
    backend.sample(groups, out);
    for (int i = 0; i < count; ++i) {
      EXPECT_FALSE(out[size_t(i)].no_token_allowed);
      all.push_back(Draw{out[size_t(i)].tokens, rngs[size_t(i)].draws});
    }
  }
  return all;
}

// The verification of two drafts {d0, d1} over `draws`, against the target distributions p[0..2]
// of the three rows (as the request's parameters shape them): token 0 ~ p0; given token 0 == d0,
// token 1 ~ p1; given tokens 0, 1 == d0, d1, token 2 ~ p2; a group emits 1 + its accepted
// drafts and takes one number per token. Also that the test would see a sampler that redraws
// on a rejection.
void check_verification(const std::vector<Draw>& draws, const std::vector<int32_t>& drafts,
                        const std::vector<std::vector<double>>& p) {
  ASSERT_EQ(drafts.size(), 2u);
  ASSERT_EQ(p.size(), 3u);
  const size_t vocab = p[0].size();
  std::vector<std::vector<int>> counts(3, std::vector<int>(vocab, 0));
  // Counted rather than asserted per draw, so that a sampler emitting the wrong number of tokens
  // still meets the distribution checks below.
  int wrong_length = 0, wrong_draws = 0;
  for (const Draw& d : draws) {
    ASSERT_FALSE(d.tokens.empty());
    ASSERT_LE(d.tokens.size(), 3u);
    size_t accepted = 0;
    while (accepted < 2 && accepted < d.tokens.size() && d.tokens[accepted] == drafts[accepted])
      ++accepted;
    wrong_length += d.tokens.size() != std::min<size_t>(accepted + 1, 3);
    wrong_draws += d.rng_draws != d.tokens.size();
    // Row i's token counts only where drafts[0..i) were accepted.
    for (size_t i = 0; i < d.tokens.size() && i <= accepted; ++i) {
      ASSERT_GE(d.tokens[i], 0);
      ASSERT_LT(size_t(d.tokens[i]), vocab);
      ++counts[i][size_t(d.tokens[i])];
    }
  }
  EXPECT_EQ(wrong_length, 0) << "draws not of 1 + accepted drafts tokens (none after a mismatch)";
  EXPECT_EQ(wrong_draws, 0) << "draws not taking one number per emitted token";
  for (size_t row = 0; row < 3; ++row) {
    SCOPED_TRACE(testing::Message() << "row " << row);
    const int n = std::accumulate(counts[row].begin(), counts[row].end(), 0);
    // Given the drafts before it were accepted: N · Π p_i(d_i).
    double want_n = double(draws.size());
    for (size_t i = 0; i < row; ++i) want_n *= p[i][size_t(drafts[i])];
    EXPECT_NEAR(n, want_n, 5 * std::sqrt(want_n) + 1) << "draws reaching this row";
    ASSERT_GT(n, 500) << "too few draws reach this row to test it";
    const double stat = chi_square(counts[row], p[row]);
    EXPECT_LT(stat, critical(p[row])) << "not the target distribution";
    if (row < 2) {
      // Power: the same counts reject the redraw-on-rejection sampler.
      const auto bad = redraw_on_rejection(p[row], drafts[row]);
      EXPECT_GT(chi_square(counts[row], bad), 10 * critical(bad));
    }
  }
}

// Row 0: d0 = 1 has probability 0.25 and is not the most likely (token 0, 0.30), so three
// drafts in four are rejected. A sampler that redraws from p on a rejection would emit token 1
// with probability 0.4375 and scale the others by 0.75: its Pearson statistic against p0 over
// 20000 draws is about 20000 · 0.25 · 0.75 = 3750 against the critical 20.5 (5 degrees of
// freedom); one that emits the draft on a rejection gives token 1 every time. Given d0, row 1's
// d1 = 2 (0.40, its most likely) is accepted in ~2000 of the ~5000 draws that reach it.
const std::vector<std::vector<double>> kProbs = {
    {0.30, 0.25, 0.18, 0.12, 0.09, 0.06},
    {0.10, 0.15, 0.40, 0.20, 0.10, 0.05},
    {0.05, 0.20, 0.10, 0.15, 0.35, 0.15},
};

Request plain_request(const std::vector<int32_t>& drafts) {
  Request q;
  q.vocab = int64_t(kProbs[0].size());
  for (const auto& row : kProbs) {
    const auto l = log_of(row);
    q.rows.insert(q.rows.end(), l.begin(), l.end());
  }
  q.drafts = drafts;
  return q;  // temperature 1, no top-k/p, no penalties
}

std::vector<std::vector<double>> softmax_rows(const Request& q) {
  std::vector<std::vector<double>> p;
  for (size_t r = 0; r <= q.drafts.size(); ++r) {
    p.push_back(softmax(
        std::vector<double>(q.rows.begin() + r * q.vocab, q.rows.begin() + (r + 1) * q.vocab)));
  }
  return p;
}

TEST(DraftSampling, UnlikelyDraftKeepsTheTargetDistribution) {
  const auto backend = make_cpu_backend(2);
  const Request q = plain_request({1, 2});
  check_verification(draw(*backend, q, kDraws, 101), q.drafts, softmax_rows(q));
}

TEST(DraftSampling, MostLikelyDraftKeepsTheTargetDistribution) {
  // d0 = 0 is row 0's most likely token (0.30; a redraw sampler: ~20000 · 0.21 = 4200 against
  // the critical 20.5); d1 = 3 (0.20) is not row 1's (~1200 draws reach row 2).
  const auto backend = make_cpu_backend(2);
  const Request q = plain_request({0, 3});
  check_verification(draw(*backend, q, kDraws, 202), q.drafts, softmax_rows(q));
}

TEST(DraftSampling, TopKAppliesToEveryVerifiedRow) {
  // top_k = 2 on every row: row 0 keeps {0, 1} (0.30, 0.25 → 0.545, 0.455), row 1 {2, 3}
  // (0.40, 0.20 → 0.667, 0.333), row 2 {4, 1} (0.35, 0.20 → 0.636, 0.364); every other token
  // must never come out of a verified row. A redraw sampler on row 0 (d0 = 1): ~20000 · 0.455 ·
  // 0.545 ≈ 4960 against the critical 10.8 (1 degree of freedom).
  const auto backend = make_cpu_backend(2);
  Request q = plain_request({1, 3});
  q.params.top_k = 2;
  std::vector<std::vector<double>> p = softmax_rows(q);
  for (auto& row : p) {
    std::vector<double> sorted = row;
    std::sort(sorted.rbegin(), sorted.rend());
    double kept = 0.0;
    for (double& x : row) kept += x = x >= sorted[1] ? x : 0.0;
    for (double& x : row) x /= kept;
  }
  EXPECT_NEAR(p[0][1], 0.25 / 0.55, 1e-6);
  EXPECT_NEAR(p[1][3], 0.20 / 0.60, 1e-6);
  EXPECT_NEAR(p[2][4], 0.35 / 0.55, 1e-6);
  check_verification(draw(*backend, q, kDraws, 303), q.drafts, p);
}

TEST(DraftSampling, PenaltiesSeeTheAcceptedDrafts) {
  // Row i is sampled as if drafts[0..i) had been accepted: the penalties of row 1 count d0 as
  // an output, those of row 2 count d0 and d1. Repetition over prompt and outputs (dividing
  // positive logits, multiplying negative ones), then frequency and presence over the outputs.
  const auto backend = make_cpu_backend(2);
  Request q;
  q.vocab = 6;
  q.rows = {1.0f, 1.2f, 0.3f,  0.5f, -0.5f, 0.2f,  //
            0.2f, 1.9f, 0.4f,  0.9f, -0.3f, 0.0f,  //
            0.5f, 2.4f, -0.2f, 0.7f, 0.1f,  0.3f};
  q.drafts = {1, 1};
  q.prompt = {5};
  q.outputs = {3, 3};
  q.params.repetition_penalty = 1.3f;
  q.params.frequency_penalty = 0.4f;
  q.params.presence_penalty = 0.2f;
  std::vector<std::vector<double>> p, unpenalised;
  for (size_t r = 0; r < 3; ++r) {
    std::vector<double> l(q.rows.begin() + r * 6, q.rows.begin() + (r + 1) * 6);
    unpenalised.push_back(softmax(l));
    std::vector<int32_t> outputs = q.outputs;
    outputs.insert(outputs.end(), q.drafts.begin(), q.drafts.begin() + r);
    std::vector<int> count(6, 0), seen(6, 0);
    for (int32_t t : outputs) ++count[size_t(t)], seen[size_t(t)] = 1;
    for (int32_t t : q.prompt) seen[size_t(t)] = 1;
    for (size_t t = 0; t < 6; ++t) {
      if (seen[t]) l[t] = l[t] > 0 ? l[t] / 1.3 : l[t] * 1.3;
      l[t] -= count[t] * 0.4 + (count[t] > 0 ? 0.2 : 0.0);
    }
    p.push_back(softmax(l));
  }
  const std::vector<Draw> draws = draw(*backend, q, kDraws, 404);
  check_verification(draws, q.drafts, p);
  // The rows after the first are penalised too: their conditional counts reject the
  // distributions without penalties.
  std::vector<int> row1(6, 0);
  for (const Draw& d : draws)
    if (d.tokens.size() >= 2) ++row1[size_t(d.tokens[1])];
  EXPECT_GT(chi_square(row1, unpenalised[1]), 10 * kChi2Critical[5]);
}

TEST(DraftSampling, SeededDrawsReproduce) {
  const auto backend = make_cpu_backend(2);
  Request q = plain_request({1, 2});
  q.params.top_p = 0.9f;
  q.params.frequency_penalty = 0.3f;
  q.outputs = {2};
  const std::vector<Draw> a = draw(*backend, q, 300, 7), b = draw(*backend, q, 300, 7);
  const std::vector<Draw> c = draw(*backend, q, 300, 8);
  ASSERT_EQ(a.size(), b.size());
  int differ = 0, lengths = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "draw " << i;
    EXPECT_EQ(a[i].rng_draws, b[i].rng_draws) << "draw " << i;
    differ += a[i].tokens != c[i].tokens;
    lengths += int(a[i].tokens.size());
  }
  EXPECT_GT(differ, 100) << "other seeds give other tokens";
  EXPECT_GT(lengths, 300) << "some drafts accepted";
  // One generator reused: the same (seed, draws) state continues the same way.
  const auto one = make_cpu_backend(1);
  for (uint64_t seed : {5u, 6u}) {
    SamplerRng r1{seed, 0}, r2{seed, 0};
    for (int step = 0; step < 50; ++step) {
      std::vector<float> l1 = q.rows, l2 = q.rows;
      SampleGroup g1;
      g1.logits = l1.data();
      g1.vocab = q.vocab;
      g1.drafts = q.drafts;
      g1.params = &q.params;
      g1.prompt = q.prompt;
      g1.outputs = q.outputs;
      g1.rng = &r1;
      SampleGroup g2 = g1;
      g2.logits = l2.data();
      g2.rng = &r2;
      std::vector<GroupSamples> o1(1), o2(1);
      backend->sample(std::span<const SampleGroup>(&g1, 1), o1);
      one->sample(std::span<const SampleGroup>(&g2, 1), o2);
      ASSERT_EQ(o1[0].tokens, o2[0].tokens) << "seed " << seed << " step " << step;
      ASSERT_EQ(r1, r2);
    }
  }
}

}  // namespace
}  // namespace kestrel
