// The eight-lane helpers: exp against libm over the softmax/SiLU range and at the edges, and the
// f16/bf16 rounding bit-identical to the scalar converters over many bit patterns (halfway
// cases, subnormals, overflow, infinities and NaN included).
#include "backend/cpu/simd_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

std::vector<float> map8(__m256 (*fn)(__m256), const std::vector<float>& in) {
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); i += 8)
    _mm256_storeu_ps(out.data() + i, fn(_mm256_loadu_ps(in.data() + i)));
  return out;
}

TEST(SimdMath, ExpMatchesLibm) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.5f; v += 0.0137f) x.push_back(v);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (int i = 0; i < 4000; ++i) x.push_back(small(rng));
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 88.7f, -87.3f}) x.push_back(v);
  while (x.size() % 8) x.push_back(0.0f);
  const auto y = map8(simd::exp8, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(double(x[i]));
    EXPECT_NEAR(y[i], ref, 3e-7 * ref) << x[i];
  }
}

TEST(SimdMath, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -1000.0f, -87.5f, 89.0f, 1000.0f, inf, 0.0f, 1.0f};
  const auto y = map8(simd::exp8, x);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], inf);
  EXPECT_EQ(y[4], inf);
  EXPECT_EQ(y[5], inf);
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_NEAR(y[7], 2.718281828, 1e-6);
}

std::vector<float> bit_patterns() {
  std::vector<float> x;
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) x.push_back(bits_to_f32(uint32_t(rng())));
  // Values near f16/bf16 rounding boundaries and ranges.
  for (uint32_t base :
       {0x3F800000u, 0x477FE000u, 0x477FF000u, 0x38800000u, 0x33000000u, 0x33800000u, 0x00000001u,
        0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u, 0x7F800001u, 0xFF800000u, 0x80000000u})
    for (int d = -40; d <= 40; ++d) x.push_back(bits_to_f32(base + uint32_t(d)));
  for (uint32_t m = 0; m < 0x10000; m += 0x1000)
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x18000u})
      x.push_back(bits_to_f32(m << 16 | low));
  while (x.size() % 8) x.push_back(1.0f);
  return x;
}

TEST(SimdMath, RoundingEqualsScalarConverters) {
  const auto x = bit_patterns();
  const auto h = map8(simd::round_f16, x);
  const auto b = map8(simd::round_bf16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want_h = f16_to_f32(f32_to_f16(x[i]));
    const float want_b = bf16_to_f32(f32_to_bf16(x[i]));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(h[i]));
      EXPECT_EQ(f32_to_bits(b[i]), f32_to_bits(want_b)) << std::hex << f32_to_bits(x[i]);
      continue;
    }
    ASSERT_EQ(f32_to_bits(h[i]), f32_to_bits(want_h)) << std::hex << f32_to_bits(x[i]);
    ASSERT_EQ(f32_to_bits(b[i]), f32_to_bits(want_b)) << std::hex << f32_to_bits(x[i]);
  }
}

TEST(SimdMath, HorizontalSums) {
  alignas(32) float v[8][8];
  __m256 a[8];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) v[i][j] = float(i * 8 + j) * 0.5f - float(j * j);
    a[i] = _mm256_load_ps(v[i]);
  }
  alignas(32) float s[8];
  _mm256_store_ps(s, simd::hsum8x8(a));
  for (int i = 0; i < 8; ++i) {
    float want = 0.0f;
    for (int j = 0; j < 8; ++j) want += v[i][j];
    EXPECT_FLOAT_EQ(s[i], want);
    EXPECT_FLOAT_EQ(simd::hsum8(a[i]), want);
  }
}

}  // namespace
}  // namespace kestrel::cpu
