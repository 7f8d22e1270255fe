#include "model/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kestrel {
namespace {

double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

}  // namespace

RopeTable make_rope_table(const ModelConfig& cfg,
                          const std::optional<std::vector<float>>& freq_divisors) {
  RopeTable t;
  t.rot_dim = int(cfg.rope_dim);
  t.interleaved = cfg.rope_interleaved;
  const int half = t.rot_dim / 2;
  const double d = double(t.rot_dim);
  const RopeScaling& rs = cfg.rope_scaling;
  double base = cfg.rope_theta;
  if (rs.type == RopeScalingType::kDynamic) {
    const double max_len = double(cfg.max_position_embeddings) * rs.factor;
    base *= std::pow(rs.factor * max_len / double(cfg.max_position_embeddings) - (rs.factor - 1.0),
                     d / (d - 2.0));
  }
  // inv_freq as HF builds it: base ** (arange(0, d, 2) / d), inverted, in f32.
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float expo = float(2 * i) / float(t.rot_dim);
    inv[i] = 1.0f / std::pow(float(base), expo);
  }
  const double orig = rs.original_max_position_embeddings > 0
                          ? double(rs.original_max_position_embeddings)
                          : double(cfg.max_position_embeddings);
  if (freq_divisors) {
    for (int i = 0; i < half && i < int(freq_divisors->size()); ++i) inv[i] /= (*freq_divisors)[i];
  } else if (rs.type == RopeScalingType::kLinear) {
    for (auto& f : inv) f = float(f / rs.factor);
  } else if (rs.type == RopeScalingType::kLlama3) {
    const double low_wl = orig / rs.low_freq_factor;
    const double high_wl = orig / rs.high_freq_factor;
    for (auto& f : inv) {
      const double wl = 2.0 * std::numbers::pi / f;
      if (wl < high_wl) continue;
      if (wl > low_wl) {
        f = float(f / rs.factor);
      } else {
        const double s =
            (orig / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = float((1.0 - s) * f / rs.factor + s * f);
      }
    }
  } else if (rs.type == RopeScalingType::kYarn) {
    auto corr = [&](double n) {
      return d * std::log(orig / (n * 2.0 * std::numbers::pi)) / (2.0 * std::log(cfg.rope_theta));
    };
    double low = corr(rs.beta_fast), high = corr(rs.beta_slow);
    if (rs.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1.0);
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      // HF: extrapolation weight = 1 - ramp keeps the original (high-frequency) dims.
      const float interp = float(inv[i] / rs.factor);
      inv[i] = float(interp * ramp + inv[i] * (1.0 - ramp));
    }
    if (rs.attention_factor) {
      t.attention_factor = float(*rs.attention_factor);
    } else if (rs.mscale != 0.0 && rs.mscale_all_dim != 0.0) {
      t.attention_factor =
          float(yarn_mscale(rs.factor, rs.mscale) / yarn_mscale(rs.factor, rs.mscale_all_dim));
    } else {
      t.attention_factor = float(yarn_mscale(rs.factor, 1.0));
    }
  }
  t.inv_freq = std::move(inv);
  return t;
}

}  // namespace kestrel
