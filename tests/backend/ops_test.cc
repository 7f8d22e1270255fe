// Row-wise kernels against float64 references on random inputs.
#include "backend/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/rope.h"
#include "base/fp16.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(RmsNorm, MatchesFloat64ForOddShapes) {
  for (int64_t dim : {1, 7, 64, 333}) {
    const int64_t rows = 5;
    auto x = randn(rows * dim, 1);
    auto w = randn(dim, 2);
    std::vector<float> y(rows * dim);
    rms_norm(x.data(), w.data(), 1e-5f, rows, dim, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double s = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int64_t i = 0; i < dim; ++i) {
        const double ref = double(w[i]) * x[r * dim + i] * s;
        EXPECT_NEAR(y[r * dim + i], ref, 1e-5 * (std::fabs(ref) + 1e-3)) << dim << " " << i;
      }
    }
  }
}

TEST(RmsNorm, Bf16ActivationsRoundBeforeAndAfterTheWeight) {
  const int64_t dim = 48;
  auto x = randn(2 * dim, 21);
  auto w = randn(dim, 22);
  std::vector<float> y(x.size());
  rms_norm(x.data(), w.data(), 1e-6f, 2, dim, y.data(), DType::BF16);
  for (int64_t r = 0; r < 2; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const float s = float(1.0 / std::sqrt(ss / dim + 1e-6));
    for (int64_t i = 0; i < dim; ++i) {
      const float normed = bf16_to_f32(f32_to_bf16(x[r * dim + i] * s));
      EXPECT_EQ(y[r * dim + i], bf16_to_f32(f32_to_bf16(w[i] * normed)));
    }
  }
}

TEST(RmsNorm, InPlace) {
  auto x = randn(3 * 17, 3);
  auto w = randn(17, 4);
  std::vector<float> y(x.size());
  rms_norm(x.data(), w.data(), 1e-6f, 3, 17, y.data());
  rms_norm(x.data(), w.data(), 1e-6f, 3, 17, x.data());
  EXPECT_EQ(x, y);
}

// The fused residual add + norm is, bit for bit, the add, the rounding and the norm in turn.
TEST(AddRmsNorm, EqualsAddRoundThenNorm) {
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const int64_t rows = 5, dim = 77;
    const auto x0 = randn(rows * dim, 11), y = randn(rows * dim, 12), w = randn(dim, 13);
    std::vector<float> xf = x0, xs = x0, hf(rows * dim), hs(rows * dim);
    add_rms_norm(xf.data(), y.data(), w.data(), 1e-5f, rows, dim, hf.data(), act);
    add_inplace(xs.data(), y.data(), rows * dim);
    round_to(act, xs.data(), rows * dim);
    rms_norm(xs.data(), w.data(), 1e-5f, rows, dim, hs.data(), act);
    EXPECT_EQ(xf, xs) << dtype_name(act);
    EXPECT_EQ(hf, hs) << dtype_name(act);
  }
}

TEST(SiluMul, MatchesFloat64) {
  auto g = randn(1001, 5, 3.0f);
  auto u = randn(1001, 6);
  std::vector<float> out(g.size());
  silu_mul(g.data(), u.data(), out.data(), int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * (std::fabs(ref) + 1e-3));
  }
}

// Gemma's GELU: against float64, over both tails of the tanh and with
// a length that leaves a partial group of eight; bf16 rounds the inputs, the GELU and the product.
TEST(GeluTanhMul, MatchesFloat64) {
  auto g = randn(1003, 8, 4.0f);
  auto u = randn(1003, 9);
  std::vector<float> out(g.size());
  gelu_tanh_mul(g.data(), u.data(), out.data(), int64_t(g.size()));
  // 0.5 x (1 + tanh(u)) as x / (1 + e^(-2u)): equal, and without the cancellation that makes
  // the first form inexact in float64 too where tanh(u) is near -1.
  auto gelu = [](double x) {
    return x / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
  };
  // e^(-2u) turns the argument's f32 rounding into a relative error of about |2u| ulps (the
  // function's own condition number there), which the bound allows.
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i], two_u = 2 * 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double ref = gelu(x) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * (1 + std::fabs(two_u)) * std::fabs(ref) + 1e-30) << "x = " << x;
  }
  std::vector<float> b(g.size());
  gelu_tanh_mul(g.data(), u.data(), b.data(), int64_t(g.size()), DType::BF16);
  for (size_t i = 0; i < g.size(); ++i) {
    const float x = round_to(DType::BF16, g[i]), y = round_to(DType::BF16, u[i]);
    const float want = round_to(DType::BF16, round_to(DType::BF16, float(gelu(x))) * y);
    // One bf16 step of the GELU at most, where f32's last bits decide the rounding.
    EXPECT_NEAR(b[i], want, std::fabs(want) * 0.0079 + 1e-30) << "x = " << g[i];
  }
}

TEST(Embedding, GathersAndDequantizesRows) {
  const int64_t V = 9, H = 64;
  auto table = randn(V * H, 7);
  std::vector<uint16_t> bf(V * H);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(table[i]);
  Tensor t{bf.data(), DType::BF16, Shape{V, H}};
  const int32_t ids[3] = {8, 0, 3};
  std::vector<float> out(3 * H);
  embedding(t, ids, 3, out.data());
  for (int r = 0; r < 3; ++r)
    for (int64_t i = 0; i < H; ++i) EXPECT_EQ(out[r * H + i], bf16_to_f32(bf[ids[r] * H + i]));
}

void rope_reference(std::vector<double>& v, int pos, const std::vector<float>& inv, int rot,
                    double af, bool interleaved) {
  const int half = rot / 2;
  for (int i = 0; i < half; ++i) {
    const double th = double(float(pos) * inv[i]);
    const double c = std::cos(th) * af, s = std::sin(th) * af;
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const double x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x1 * c + x0 * s;
  }
}

TEST(Rope, NeoxAndInterleavedMatchFloat64WithPartialRotation) {
  const int heads = 3, hd = 32;
  for (bool inter : {false, true}) {
    for (int rot : {32, 16}) {
      std::vector<float> inv(rot / 2);
      for (int i = 0; i < rot / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rot);
      const int32_t pos[4] = {0, 1, 17, 255};
      auto x = randn(4 * heads * hd, 11);
      auto y = x;
      RopeParams p{inv.data(), rot, 1.25f, inter};
      apply_rope(y.data(), 4, heads, hd, pos, p);
      for (int t = 0; t < 4; ++t)
        for (int h = 0; h < heads; ++h) {
          std::vector<double> ref(x.begin() + (t * heads + h) * hd,
                                  x.begin() + (t * heads + h + 1) * hd);
          rope_reference(ref, pos[t], inv, rot, 1.25, inter);
          for (int d = 0; d < hd; ++d)
            EXPECT_NEAR(y[(t * heads + h) * hd + d], ref[d], 2e-5 * (1 + std::fabs(ref[d])))
                << "inter=" << inter << " rot=" << rot << " t=" << t << " d=" << d;
        }
    }
  }
}

TEST(Rope, Bf16ActivationsGiveRepresentableValuesNearF32) {
  const int heads = 2, hd = 16;
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
  auto x = randn(3 * heads * hd, 31);
  round_to(DType::BF16, x.data(), int64_t(x.size()));
  auto a = x, b = x;
  const int32_t pos[3] = {3, 50, 200};
  apply_rope(a.data(), 3, heads, hd, pos, RopeParams{inv.data(), hd, 1.0f, false, DType::F32});
  apply_rope(b.data(), 3, heads, hd, pos, RopeParams{inv.data(), hd, 1.0f, false, DType::BF16});
  bool any_differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i], bf16_to_f32(f32_to_bf16(b[i])));
    EXPECT_NEAR(b[i], a[i], 2e-2 * (1 + std::fabs(a[i])));
    any_differs |= a[i] != b[i];
  }
  EXPECT_TRUE(any_differs);
}

// With bf16 activations each product and the sum are rounded, in the vector lanes (pairs 0..15)
// exactly as in the scalar tail (pairs 16..19).
TEST(Rope, Bf16RoundsEachProductAndTheSum) {
  const int heads = 3, hd = 40, half = hd / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
  auto x = randn(2 * heads * hd, 32);
  round_to(DType::BF16, x.data(), int64_t(x.size()));
  auto y = x;
  const int32_t pos[2] = {7, 1000};
  apply_rope(y.data(), 2, heads, hd, pos, RopeParams{inv.data(), hd, 1.0f, false, DType::BF16});
  auto r = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* v = x.data() + (t * heads + h) * hd;
      const float* out = y.data() + (t * heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        const float theta = float(pos[t]) * inv[i];
        const float c = r(std::cos(theta)), sn = r(std::sin(theta));
        const float a = v[i], b = v[i + half];
        ASSERT_EQ(out[i], r(r(a * c) + r(-b * sn))) << "t " << t << " h " << h << " pair " << i;
        ASSERT_EQ(out[i + half], r(r(b * c) + r(a * sn)))
            << "t " << t << " h " << h << " pair " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu
