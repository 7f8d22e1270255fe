// MoE routers against brute-force references written here (full sorts in float64 where the
// value matters, f32 where the spec selects on f32 scores), and group_by_expert round trips.
#include "backend/cpu/moe_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

// Indices 0..n-1 ordered by descending score, ties to the lower index.
std::vector<int> ranked(const std::vector<double>& score) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
  return idx;
}

// Logits with many exact ties (drawn from a few values) or all distinct (normal).
std::vector<float> make_logits(int64_t T, int E, bool ties, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, 4);
  const float few[5] = {-1.5f, 0.0f, 0.25f, 1.0f, 3.0f};
  std::vector<float> x(size_t(T * E));
  for (float& v : x) v = ties ? few[pick(rng)] : nd(rng);
  return x;
}

void check_softmax_router(int64_t T, int E, int k, bool norm, bool ties) {
  std::mt19937 rng(E * 31 + k + ties);
  const auto logits = make_logits(T, E, ties, rng);
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<float> w(ids.size());
  route_softmax_topk(logits.data(), T, E, k, norm, ids.data(), w.data());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> p(static_cast<size_t>(E));
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(double(logits[t * E + e]));
    for (double& v : p) v /= sum;
    const auto order = ranked(p);
    double top_sum = 0;
    for (int j = 0; j < k; ++j) top_sum += p[order[j]];
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], order[j]) << "token " << t << " slot " << j;
      const double want = norm ? p[order[j]] / top_sum : p[order[j]];
      ASSERT_NEAR(w[t * k + j], want, 5e-7 * want) << "token " << t << " slot " << j;
    }
  }
}

TEST(MoeRouting, SoftmaxTopkRenormalized) {
  check_softmax_router(50, 64, 8, true, false);
}

TEST(MoeRouting, SoftmaxTopkRaw) {
  check_softmax_router(50, 60, 4, false, false);
}

TEST(MoeRouting, SoftmaxTopkTiesGoToLowerIds) {
  check_softmax_router(80, 16, 6, true, true);
  check_softmax_router(20, 7, 7, false, true);
}

struct GroupedCase {
  int E, k, n_group, topk_group;
  bool norm;
  float scaling;
  float bias_mean;  // negative: every selection score can be below zero
  bool ties;
};

void check_grouped_router(const GroupedCase& c, int64_t T) {
  std::mt19937 rng(c.E * 7 + c.k * 3 + c.n_group + c.ties);
  auto logits = make_logits(T, c.E, c.ties, rng);
  std::normal_distribution<float> bd(c.bias_mean, 0.3f);
  std::vector<float> bias(size_t(c.E));
  for (float& b : bias) b = bd(rng);
  const int gs = c.E / c.n_group;
  if (c.ties) {
    // Group 1 a copy of group 0: equal group scores, and equal experts across them.
    for (int i = 0; i < gs; ++i) bias[gs + i] = bias[i];
    for (int64_t t = 0; t < T; ++t)
      for (int i = 0; i < gs; ++i) logits[t * c.E + gs + i] = logits[t * c.E + i];
  }
  std::vector<int32_t> ids(size_t(T * c.k));
  std::vector<float> w(ids.size());
  route_grouped_sigmoid(logits.data(), bias.data(), T, c.E, c.k, c.n_group, c.topk_group, c.norm,
                        c.scaling, ids.data(), w.data());
  for (int64_t t = 0; t < T; ++t) {
    // Selection runs on f32 scores (the spec's fp32); the sigmoid itself is taken in float64.
    std::vector<double> u(size_t(c.E)), sel(size_t(c.E));
    for (int e = 0; e < c.E; ++e) {
      u[e] = 1.0 / (1.0 + std::exp(-double(logits[t * c.E + e])));
      sel[e] = double(float(u[e]) + bias[e]);
    }
    std::vector<double> gscore(size_t(c.n_group));
    for (int g = 0; g < c.n_group; ++g) {
      std::vector<double> in(sel.begin() + g * gs, sel.begin() + (g + 1) * gs);
      std::sort(in.begin(), in.end(), std::greater<>());
      gscore[g] = double(float(in[0]) + float(in[1]));
    }
    const auto gorder = ranked(gscore);
    std::vector<double> masked(size_t(c.E), -INFINITY);
    for (int i = 0; i < c.topk_group; ++i)
      for (int e = gorder[i] * gs; e < (gorder[i] + 1) * gs; ++e) masked[e] = sel[e];
    const auto order = ranked(masked);
    double sum = 0;
    for (int j = 0; j < c.k; ++j) sum += u[order[j]];
    for (int j = 0; j < c.k; ++j) {
      ASSERT_EQ(ids[t * c.k + j], order[j]) << "token " << t << " slot " << j;
      const double want = (c.norm ? u[order[j]] / sum : u[order[j]]) * c.scaling;
      ASSERT_NEAR(w[t * c.k + j], want, 5e-7 * want) << "token " << t << " slot " << j;
    }
  }
}

TEST(MoeRouting, GroupedSigmoidV3Shape) {
  check_grouped_router({256, 8, 8, 4, true, 2.5f, 0.0f, false}, 40);
}

TEST(MoeRouting, GroupedSigmoidNoRenormNegativeBias) {
  check_grouped_router({64, 6, 8, 3, false, 1.5f, -2.0f, false}, 60);
}

TEST(MoeRouting, GroupedSigmoidTiesAndExactFit) {
  // k equals the experts of the kept groups: the group choice alone decides the set.
  check_grouped_router({32, 8, 8, 2, true, 1.0f, -0.5f, true}, 60);
  check_grouped_router({48, 5, 6, 4, true, 2.5f, 0.1f, true}, 60);
}

// Negative biases push every selection score below zero: experts of dropped groups must still
// never be chosen (HF 5.x and DeepSeek's reference mask them to -inf).
TEST(MoeRouting, GroupedSigmoidNeverPicksDroppedGroups) {
  const int E = 16, n_group = 4, topk_group = 1, k = 3;
  std::vector<float> logits(E, -3.0f), bias(E, -5.0f);
  logits[9] = 2.0f;  // group 2 (experts 8..11) wins on its two best scores
  logits[10] = 1.0f;
  std::vector<int32_t> ids(k);
  std::vector<float> w(k);
  route_grouped_sigmoid(logits.data(), bias.data(), 1, E, k, n_group, topk_group, false, 1.0f,
                        ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{9, 10, 8}));
  EXPECT_NEAR(w[0], 1 / (1 + std::exp(-2.0)), 1e-7);
}

TEST(MoeRouting, GroupedSigmoidWithoutBias) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 0.5f, 1.0f, 1.5f};  // groups {0,1,2} {3,4,5}
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_grouped_sigmoid(logits.data(), nullptr, 1, 6, 2, 2, 1, true, 2.0f, ids.data(), w.data());
  // Group scores: σ(2)+σ(0.1) = 1.405 < σ(1.5)+σ(1) = 1.549, so group 1 wins.
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 4}));
  const double a = 1 / (1 + std::exp(-1.5)), b = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(w[0], 2 * a / (a + b), 1e-6);
  EXPECT_NEAR(w[1], 2 * b / (a + b), 1e-6);
}

TEST(MoeRouting, RejectsBadRouterArguments) {
  std::vector<float> x(60, 0.0f);
  std::vector<int32_t> ids(16);
  std::vector<float> w(16);
  EXPECT_DEATH(
      route_grouped_sigmoid(x.data(), nullptr, 1, 60, 4, 7, 2, true, 1.0f, ids.data(), w.data()),
      "groups");
  EXPECT_DEATH(
      route_grouped_sigmoid(x.data(), nullptr, 1, 60, 13, 6, 1, true, 1.0f, ids.data(), w.data()),
      "kept groups");
  EXPECT_DEATH(
      route_grouped_sigmoid(x.data(), nullptr, 1, 60, 4, 6, 7, true, 1.0f, ids.data(), w.data()),
      "keeps 7 of 6");
  EXPECT_DEATH(route_softmax_topk(x.data(), 1, 8, 9, true, ids.data(), w.data()), "top-9 of 8");
}

void check_groups(const std::vector<int32_t>& ids, int64_t T, int k, int E,
                  const MoePermutation& g) {
  ASSERT_EQ(g.offsets.size(), size_t(E) + 1);
  ASSERT_EQ(g.offsets[0], 0);
  ASSERT_EQ(g.offsets[E], T * k);
  ASSERT_EQ(g.token.size(), size_t(T * k));
  ASSERT_EQ(g.row_of_slot.size(), size_t(T * k));
  // row_of_slot is a permutation; its inverse names the pair of each row.
  std::vector<int32_t> slot_of_row(size_t(T * k), -1);
  for (int64_t s = 0; s < T * k; ++s) {
    const int32_t r = g.row_of_slot[size_t(s)];
    ASSERT_GE(r, 0);
    ASSERT_LT(r, T * k);
    ASSERT_EQ(slot_of_row[size_t(r)], -1) << "row " << r << " twice";
    slot_of_row[size_t(r)] = int32_t(s);
  }
  std::vector<int> seen(size_t(T * k), 0);
  for (int e = 0; e < E; ++e) {
    ASSERT_LE(g.offsets[e], g.offsets[e + 1]);
    const int64_t count = std::count(ids.begin(), ids.end(), e);
    ASSERT_EQ(g.offsets[e + 1] - g.offsets[e], count) << "expert " << e;
    for (int32_t i = g.offsets[e]; i < g.offsets[e + 1]; ++i) {
      const int32_t s = slot_of_row[size_t(i)];
      ASSERT_GE(s, 0);
      ASSERT_LT(s, T * k);
      ASSERT_EQ(ids[s], e);
      ASSERT_EQ(g.token[i], s / k);
      if (i > g.offsets[e]) {
        ASSERT_LE(g.token[i - 1], g.token[i]);
      }
      ++seen[s];
    }
  }
  for (int64_t s = 0; s < T * k; ++s) ASSERT_EQ(seen[s], 1) << "slot " << s;
}

TEST(MoeRouting, GroupByExpertRoundTrip) {
  std::mt19937 rng(77);
  const int E = 12;
  MoePermutation groups;
  // Routed ids (distinct per token) and raw ids with repeats; experts 4 and 11 never used.
  const int64_t T = 37;
  const int k = 3;
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<int32_t> usable = {0, 1, 2, 3, 5, 6, 7, 8, 9, 10};
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(usable.begin(), usable.end(), rng);
    std::copy_n(usable.begin(), k, ids.begin() + t * k);
  }
  group_by_expert(ids.data(), T, k, E, groups);
  check_groups(ids, T, k, E, groups);
  EXPECT_EQ(groups.offsets[4], groups.offsets[5]);
  EXPECT_EQ(groups.offsets[11], groups.offsets[12]);

  // A smaller routing into the same object keeps its buffers.
  const int32_t* token_buf = groups.token.data();
  std::uniform_int_distribution<int32_t> any(0, E - 1);
  std::vector<int32_t> small(10);
  for (int32_t& v : small) v = any(rng);
  group_by_expert(small.data(), 5, 2, E, groups);
  check_groups(small, 5, 2, E, groups);
  EXPECT_EQ(groups.token.data(), token_buf);

  group_by_expert(small.data(), 0, 2, E, groups);
  check_groups({}, 0, 2, E, groups);
}

TEST(MoeRouting, GroupByExpertAfterRouter) {
  const int64_t T = 64;
  const int E = 32, k = 4;
  std::mt19937 rng(5);
  const auto logits = make_logits(T, E, false, rng);
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<float> w(ids.size());
  route_grouped_sigmoid(logits.data(), nullptr, T, E, k, 4, 2, true, 1.0f, ids.data(), w.data());
  MoePermutation groups;
  group_by_expert(ids.data(), T, k, E, groups);
  check_groups(ids, T, k, E, groups);
}

TEST(MoeRouting, GroupByExpertRejectsBadIds) {
  std::vector<int32_t> ids = {0, 3, 5, 1};
  MoePermutation groups;
  EXPECT_DEATH(group_by_expert(ids.data(), 2, 2, 5, groups), "out of range");
}

// DeepSeek-V4: s = sqrt(softplus(logit)); the k best s + bias; weights s / Σ s · scaling.
TEST(MoeRouting, SqrtSoftplusPicksByBiasedScoresAndWeighsByRawOnes) {
  std::mt19937 rng(5);
  const int64_t T = 9;
  const int E = 16, k = 6;
  const auto logits = make_logits(T, E, false, rng);
  std::vector<float> bias(static_cast<size_t>(E));
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (float& b : bias) b = nd(rng);
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<float> w(ids.size());
  route_sqrt_softplus(logits.data(), bias.data(), T, E, k, false, 1.5f, DType::F32, ids.data(),
                      w.data());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> s(static_cast<size_t>(E)), sel(s.size());
    for (int e = 0; e < E; ++e) {
      s[e] = std::sqrt(std::log1p(std::exp(double(logits[t * E + e]))));
      sel[e] = s[e] + bias[e];
    }
    const auto order = ranked(sel);
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += s[order[j]];
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], order[j]) << "token " << t << " slot " << j;
      EXPECT_NEAR(w[t * k + j], s[order[j]] / sum * 1.5, 2e-6) << "token " << t;
    }
  }
}

// Hash routing keeps the given experts and weighs them the same way; in bf16 every step rounds.
TEST(MoeRouting, SqrtSoftplusWithGivenIdsAndBf16Rounding) {
  std::mt19937 rng(6);
  const int64_t T = 4;
  const int E = 8, k = 2;
  const auto logits = make_logits(T, E, false, rng);
  std::vector<int32_t> ids = {3, 0, 7, 1, 2, 2, 5, 6};
  std::vector<float> w(ids.size());
  const std::vector<int32_t> given = ids;
  route_sqrt_softplus(logits.data(), nullptr, T, E, k, true, 1.5f, DType::BF16, ids.data(),
                      w.data());
  EXPECT_EQ(ids, given);
  auto bf = [](double v) { return double(bf16_to_f32(f32_to_bf16(float(v)))); };
  for (int64_t t = 0; t < T; ++t) {
    double s[2], sum = 0;
    for (int j = 0; j < k; ++j) {
      const double x = logits[t * E + given[t * k + j]];
      sum += s[j] = bf(std::sqrt(bf(x > 20 ? x : std::log1p(std::exp(x)))));
    }
    const double denom = bf(bf(sum) + 1e-20);
    for (int j = 0; j < k; ++j)
      EXPECT_NEAR(w[t * k + j], bf(bf(s[j] / denom) * 1.5), 1e-6) << "token " << t << " " << j;
  }
}

}  // namespace
}  // namespace kestrel::cpu
