// DeepSeek-V4's mHC kernels against float64 references of deepseek-v4-family.md §2.7: the
// coefficients (pre, post and the Sinkhorn-projected comb), collapse and expand, in f32 and
// with bf16 rounding where Backend::hc_expand specifies it.
#include "backend/cpu/hyper_connection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

struct Site {
  int n;
  int64_t hidden;
  std::vector<float> fn, base, scale;
  HyperConnection params(int iters) const {
    return {fn.data(), base.data(), scale.data(), n, iters, 1e-6f, 1e-6f};
  }
};

Site random_site(int n, int64_t hidden, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Site s{n, hidden, {}, {}, {}};
  s.fn.resize(size_t((2 + n) * n * n * hidden));
  for (float& v : s.fn) v = 0.1f * nd(rng);
  s.base.resize(size_t((2 + n) * n));
  for (float& v : s.base) v = 0.5f * nd(rng);
  s.scale = {1.0f + 0.1f * nd(rng), 1.0f + 0.1f * nd(rng), 1.0f + 0.1f * nd(rng)};
  return s;
}

double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// pre [n], post [n], comb [n][n] of one token in float64.
void reference(const Site& s, const float* x, int iters, std::vector<double>& pre,
               std::vector<double>& post, std::vector<std::vector<double>>& comb) {
  const int n = s.n;
  const int64_t width = n * s.hidden;
  double ss = 0;
  for (int64_t d = 0; d < width; ++d) ss += double(x[d]) * x[d];
  const double inv = 1.0 / std::sqrt(ss / double(width) + 1e-6);
  std::vector<double> z(size_t((2 + n) * n));
  for (size_t r = 0; r < z.size(); ++r) {
    double dot = 0;
    for (int64_t d = 0; d < width; ++d) dot += double(s.fn[r * width + d]) * x[d];
    const double part = s.scale[r < size_t(n) ? 0 : r < size_t(2 * n) ? 1 : 2];
    z[r] = dot * inv * part + s.base[r];
  }
  pre.assign(size_t(n), 0);
  post.assign(size_t(n), 0);
  for (int j = 0; j < n; ++j) {
    pre[j] = sigmoid(z[j]) + 1e-6;
    post[j] = 2 * sigmoid(z[n + j]);
  }
  comb.assign(size_t(n), std::vector<double>(size_t(n)));
  for (int j = 0; j < n; ++j) {
    double mx = -1e300, sum = 0;
    for (int k = 0; k < n; ++k) mx = std::max(mx, z[2 * n + j * n + k]);
    for (int k = 0; k < n; ++k) sum += comb[j][k] = std::exp(z[2 * n + j * n + k] - mx);
    for (int k = 0; k < n; ++k) comb[j][k] = comb[j][k] / sum + 1e-6;
  }
  auto cols = [&] {
    for (int k = 0; k < n; ++k) {
      double c = 0;
      for (int j = 0; j < n; ++j) c += comb[j][k];
      for (int j = 0; j < n; ++j) comb[j][k] /= c + 1e-6;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < n; ++j) {
      double r = 0;
      for (int k = 0; k < n; ++k) r += comb[j][k];
      for (int k = 0; k < n; ++k) comb[j][k] /= r + 1e-6;
    }
    cols();
  }
}

TEST(HyperConnection, CoefficientsMatchAFloat64Reference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& [n, hidden, iters] : {std::tuple{4, 64, 20}, {2, 37, 1}, {4, 24, 3}}) {
    const Site s = random_site(n, hidden, rng);
    const int64_t T = 5;
    std::vector<float> x(size_t(T * n * hidden));
    for (float& v : x) v = nd(rng);
    std::vector<float> pre(size_t(T * n)), post(pre.size()), comb(size_t(T * n * n));
    hc_coefficients(s.params(iters), x.data(), T, hidden, pre.data(), post.data(), comb.data());
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> rp, rq;
      std::vector<std::vector<double>> rc;
      reference(s, x.data() + t * n * hidden, iters, rp, rq, rc);
      for (int j = 0; j < n; ++j) {
        EXPECT_NEAR(pre[t * n + j], rp[j], 2e-6) << "token " << t << " stream " << j;
        EXPECT_NEAR(post[t * n + j], rq[j], 4e-6) << "token " << t << " stream " << j;
        double column = 0;
        for (int k = 0; k < n; ++k) {
          EXPECT_NEAR(comb[(t * n + j) * n + k], rc[j][k], 5e-6) << "token " << t;
          column += comb[(t * n + k) * n + j];
        }
        // Sinkhorn ends on a column normalisation: column j sums to one (less the eps).
        EXPECT_NEAR(column, 1.0, 1e-5) << "token " << t << " column " << j;
      }
    }
  }
}

// collapse is Σ_j pre_j x_j rounded once; expand is post·y + combᵀx with bf16 rounding of the
// coefficients, the product, the mix and the sum, or exact f32 arithmetic.
TEST(HyperConnection, CollapseAndExpandRoundWhereSpecified) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int n = 4;
  const int64_t T = 3, H = 19;
  std::vector<float> x(size_t(T * n * H)), y(size_t(T * H)), pre(size_t(T * n)), post(pre.size()),
      comb(size_t(T * n * n));
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(nd(rng)));
  for (float& v : y) v = bf16_to_f32(f32_to_bf16(nd(rng)));
  for (float& v : pre) v = std::fabs(nd(rng));
  for (float& v : post) v = std::fabs(nd(rng));
  for (float& v : comb) v = std::fabs(nd(rng)) / 2;
  auto bf = [](double v) { return double(bf16_to_f32(f32_to_bf16(float(v)))); };
  for (DType act : {DType::F32, DType::BF16}) {
    auto r = [&](double v) { return act == DType::BF16 ? bf(v) : double(float(v)); };
    std::vector<float> out(size_t(T * H));
    hc_collapse(x.data(), pre.data(), T, n, H, out.data(), act);
    std::vector<float> expanded = x;
    hc_expand(expanded.data(), y.data(), post.data(), comb.data(), T, n, H, act);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < H; ++d) {
        double c = 0;
        for (int j = 0; j < n; ++j) c += double(pre[t * n + j]) * x[(t * n + j) * H + d];
        EXPECT_NEAR(out[t * H + d], r(c),
                    1e-5 * (1 + std::fabs(c)) + (act == DType::BF16 ? 1e-2 * std::fabs(c) : 0));
        for (int k = 0; k < n; ++k) {
          double mix = 0;
          for (int j = 0; j < n; ++j)
            mix += r(comb[(t * n + j) * n + k]) * double(x[(t * n + j) * H + d]);
          const double want = r(r(r(post[t * n + k]) * y[t * H + d]) + r(mix));
          EXPECT_NEAR(expanded[(t * n + k) * H + d], want, 1e-5 * (1 + std::fabs(want)))
              << dtype_name(act) << " token " << t << " stream " << k << " dim " << d;
        }
      }
  }
}

}  // namespace
}  // namespace kestrel::cpu
