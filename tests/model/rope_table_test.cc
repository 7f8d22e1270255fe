// RoPE frequency tables against the scaling formulas evaluated in float64.
#include "model/rope_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace kestrel {
namespace {

ModelConfig base_config() {
  ModelConfig c;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 256;
  return c;
}

double plain(int i, int d, double base) {
  return std::pow(base, -2.0 * i / d);
}

TEST(RopeTable, DefaultAndLinear) {
  ModelConfig c = base_config();
  RopeTable t = make_rope_table(c);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(t.inv_freq[i], plain(i, 16, 1e4), 1e-6 * plain(i, 16, 1e4));
  EXPECT_EQ(t.attention_factor, 1.0f);
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 4.0;
  t = make_rope_table(c);
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(t.inv_freq[i], plain(i, 16, 1e4) / 4, 1e-6 * plain(i, 16, 1e4));
}

TEST(RopeTable, Llama3BandsKeepSmoothAndDivide) {
  ModelConfig c = base_config();
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  RopeTable t = make_rope_table(c);
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < 8; ++i) {
    const double f = plain(i, 16, 1e4), wl = 2 * std::numbers::pi / f;
    double ref;
    if (wl < 64.0 / 4.0) {
      ref = f;
      ++kept;
    } else if (wl > 64.0) {
      ref = f / 8;
      ++divided;
    } else {
      const double s = (64.0 / wl - 1.0) / 3.0;
      ref = (1 - s) * f / 8 + s * f;
      ++smoothed;
    }
    EXPECT_NEAR(t.inv_freq[i], ref, 1e-6 * f) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTable, YarnRampAndMscale) {
  ModelConfig c = base_config();
  c.head_dim = c.rope_dim = 8;
  c.rope_scaling.type = RopeScalingType::kYarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  RopeTable t = make_rope_table(c);
  // models.md §7.1: d = 8, L0 = 64 gives low = 0, high = 2.
  const double low = 0, high = 2;
  for (int i = 0; i < 4; ++i) {
    const double f = plain(i, 8, 1e4);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(t.inv_freq[i], f / 4 * ramp + f * (1 - ramp), 1e-6 * f) << i;
  }
  EXPECT_NEAR(t.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  EXPECT_NEAR(make_rope_table(c).attention_factor, 1.0, 1e-6);
}

TEST(RopeTable, DynamicUsesStaticScaledBase) {
  ModelConfig c = base_config();
  c.rope_scaling.type = RopeScalingType::kDynamic;
  c.rope_scaling.factor = 2.0;
  RopeTable t = make_rope_table(c);
  const double base = 1e4 * std::pow(2.0 * 2.0 - 1.0, 16.0 / 14.0);
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(t.inv_freq[i], plain(i, 16, base), 1e-6 * plain(i, 16, 1e4));
}

TEST(RopeTable, GgufDivisorsOverrideAndInterleaving) {
  ModelConfig c = base_config();
  c.rope_interleaved = true;
  std::vector<float> div = {1, 1, 2, 3, 4, 5, 8, 8};
  RopeTable t = make_rope_table(c, div);
  EXPECT_TRUE(t.interleaved);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(t.inv_freq[i], plain(i, 16, 1e4) / div[i], 1e-6);
}

}  // namespace
}  // namespace kestrel
