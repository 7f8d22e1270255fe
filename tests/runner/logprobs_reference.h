// tests/runner/logprobs_reference.h — a token's reported logprobs (its own, its rank, the top-N
// alternatives) against the float64 log-softmax of a reference logits row.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "runner/model_runner.h"

namespace kestrel::test {

// The relative logits tolerance of the f32 fixtures (model_golden_test: max |Δlogit| ≤ 1e-4 of the
// row's largest |logit|).
constexpr double kF32LogitsRelTol = 1e-4;

// `got` against log_softmax(logits[0..vocab)) in float64. A logprob z_i − logsumexp(z) moves by
// at most twice the logits' error, so values must agree within 2 · rel_tol · max |z|. The k-th
// alternative's id must be the reference's k-th by value, or a token whose reference value is
// within twice that of it (a near-tie may come out in either order); ids are distinct and values
// best first. A computed rank (prompt logprobs) lies between the ranks the token's value allows
// either way of a near-tie; sampled tokens carry none (0).
enum class Rank { kComputed, kNone };
inline void expect_logprobs_match(const TokenLogprobs& got, const float* logits, int64_t vocab,
                                  size_t top_n, Rank rank, double rel_tol,
                                  const std::string& where) {
  double max = logits[0], mag = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    max = std::max<double>(max, logits[v]);
    mag = std::max<double>(mag, std::fabs(logits[v]));
  }
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(logits[v]) - max);
  std::vector<double> want(size_t(vocab), 0.0);
  for (int64_t v = 0; v < vocab; ++v) want[v] = double(logits[v]) - max - std::log(sum);
  const double tol = 2 * rel_tol * mag;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return want[a] > want[b]; });

  ASSERT_TRUE(got.token >= 0 && got.token < vocab) << where;
  EXPECT_NEAR(got.logprob, want[got.token], tol) << where << " token " << got.token;
  int64_t surely_above = 0, maybe_above = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    surely_above += want[v] > want[got.token] + 2 * tol;
    maybe_above += v != got.token && want[v] > want[got.token] - 2 * tol;
  }
  if (rank == Rank::kComputed) {
    EXPECT_GE(got.rank, 1 + surely_above) << where;
    EXPECT_LE(got.rank, 1 + maybe_above) << where;
  } else {
    EXPECT_EQ(got.rank, 0) << where;
  }

  ASSERT_EQ(got.top.size(), std::min<size_t>(top_n, size_t(vocab))) << where;
  std::set<int32_t> seen;
  for (size_t k = 0; k < got.top.size(); ++k) {
    const TokenLogprob& alt = got.top[k];
    ASSERT_TRUE(alt.token >= 0 && alt.token < vocab) << where;
    EXPECT_TRUE(seen.insert(alt.token).second) << where << ": " << alt.token << " twice";
    EXPECT_NEAR(alt.logprob, want[alt.token], tol) << where << " alternative " << k;
    EXPECT_NEAR(want[alt.token], want[order[k]], 2 * tol)
        << where << " alternative " << k << " is " << alt.token << ", the reference's is "
        << order[k];
    if (k > 0) {
      EXPECT_GE(got.top[k - 1].logprob, alt.logprob) << where;
    }
  }
}

}  // namespace kestrel::test
