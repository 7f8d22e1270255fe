#include "base/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kestrel {
namespace {

TEST(Fp16, HalfRoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << "bits " << h;
  }
}

TEST(Fp16, HalfRoundsToNearestEven) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);                // tie -> even
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3.0f / 2048)), 1.0f + 4.0f / 2048);  // tie -> even (up)
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(5.9604644775390625e-08f)), 5.9604644775390625e-08f);
}

TEST(Fp16, Bf16MatchesRoundToNearestEven) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int i = 0; i < 10000; ++i) {
    const float f = dist(rng);
    const float back = bf16_to_f32(f32_to_bf16(f));
    EXPECT_LE(std::fabs(back - f), std::fabs(f) / 256.0f);
  }
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

}  // namespace
}  // namespace kestrel
