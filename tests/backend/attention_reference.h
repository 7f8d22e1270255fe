// tests/backend/attention_reference.h — a float64 reference for one query row of attention that
// rounds where the kernels are specified to (paged_attention.h, mla_attention.h) and bounds what
// is left, the f32 arithmetic, so that each output element gets the interval the kernel's result
// must lie in. Nothing here depends on the kernels' order of operations.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "base/fp16.h"
#include "tensor/dtype.h"

namespace kestrel::cpu::test {

// Where reduced-precision attention rounds (F32: not at all): q before Q·Kᵀ, the scores and the
// scaled scores, the normalized probabilities before P·V, and the output.
struct AttentionRounding {
  DType q = DType::F32, scores = DType::F32, probs = DType::F32, out = DType::F32;
};

// What the kernels are specified to round with a cache of dtype `cache` and activations `act`:
// q and the probabilities to the cache dtype (the operands of a half-precision GEMM), and with
// reduced-precision activations the scores, scaled scores, probabilities and output to `act`.
inline AttentionRounding specified_rounding(DType cache, DType act) {
  return {cache, act, act != DType::F32 ? act : cache, act};
}

struct Interval {
  double lo, hi;
  bool contains(double x) const { return lo <= x && x <= hi; }
};

// What x reads back as once stored in dtype t (round to nearest even).
inline float rounded(DType t, float x) {
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  return x;
}

namespace detail {

constexpr double kU = 0x1p-24;  // f32 unit roundoff
// simd::exp8's relative error in ulps (simd_math_test bounds it by 3e-7, about 5 ulps).
constexpr double kExpUlps = 6;
// The largest float ≤ x and the smallest float ≥ x: a float computed from a value in [lo, hi]
// with round-to-nearest lies in [down(lo), up(hi)].
inline float down(double x) {
  const float f = float(x);
  return double(f) > x ? std::nextafter(f, -std::numeric_limits<float>::infinity()) : f;
}
inline float up(double x) {
  const float f = float(x);
  return double(f) < x ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
}
// A value in `v` computed in f32, then rounded to t (rounding is monotonic).
inline Interval round_to(DType t, Interval v) {
  return {rounded(t, down(v.lo)), rounded(t, up(v.hi))};
}

}  // namespace detail

// Bounds on out = softmax(scale · q·Kᵀ)·V for one query row q [d] over n keys (keys[j] [d],
// values[j] [dv], exactly as the kernel reads them from its cache), computed as `r` rounds.
// Left to bound after the rounding: each dot product and P·V sum in f32 (γ_n of the sum of
// magnitudes, whatever the order), the f32 scale product, and the softmax in f32 (the exp's
// ulps, the max subtraction, the sum, the reciprocal and the product: relative).
inline std::vector<Interval> attention_bounds(const float* q, int d,
                                              const std::vector<const float*>& keys,
                                              const std::vector<const float*>& values, int dv,
                                              float scale, const AttentionRounding& r) {
  using namespace detail;
  const int n = int(keys.size());
  std::vector<double> qr(size_t(d), 0.0);
  for (int i = 0; i < d; ++i) qr[i] = rounded(r.q, q[i]);
  std::vector<Interval> s(size_t(n), Interval{0, 0});
  for (int j = 0; j < n; ++j) {
    double dot = 0, mag = 0;
    for (int i = 0; i < d; ++i) {
      dot += qr[i] * keys[j][i];
      mag += std::fabs(qr[i] * keys[j][i]);
    }
    const double err = (d + 1) * kU * mag;
    const Interval raw = round_to(r.scores, {dot - err, dot + err});
    s[j] = round_to(r.scores, {raw.lo * scale, raw.hi * scale});
  }
  double m = -std::numeric_limits<double>::infinity();
  for (const Interval& v : s) m = std::max(m, v.hi);
  // Relative errors: exp(s_j - max) is off by its ulps and by the rounding of its argument (at
  // most m - s_j.lo); the sum by n roundings and its terms' errors, weighted; the reciprocal and
  // the product by one rounding each.
  std::vector<double> elo(size_t(n), 0.0), ehi(size_t(n), 0.0), exp_err(size_t(n), 0.0);
  double sum_lo = 0, sum_hi = 0, weighted_err = 0;
  for (int j = 0; j < n; ++j) {
    sum_lo += elo[j] = std::exp(s[j].lo - m);
    sum_hi += ehi[j] = std::exp(s[j].hi - m);
    exp_err[j] = (kExpUlps + (m - s[j].lo)) * kU;
    weighted_err += ehi[j] * exp_err[j];
  }
  const double sum_err = weighted_err / sum_lo + n * kU;
  std::vector<Interval> p(size_t(n), Interval{0, 0});
  for (int j = 0; j < n; ++j) {
    const double eps = exp_err[j] + sum_err + 2 * kU;
    const Interval exact{elo[j] / (sum_hi - ehi[j] + elo[j]), ehi[j] / (sum_lo - elo[j] + ehi[j])};
    p[j] = round_to(r.probs, {exact.lo * (1 - eps), exact.hi * (1 + eps)});
  }
  std::vector<Interval> out(size_t(dv), Interval{0, 0});
  for (int i = 0; i < dv; ++i) {
    double lo = 0, hi = 0, mag = 0;
    for (int j = 0; j < n; ++j) {
      const double a = p[j].lo * values[j][i], b = p[j].hi * values[j][i];
      lo += std::min(a, b);
      hi += std::max(a, b);
      mag += std::max(std::fabs(a), std::fabs(b));
    }
    const double err = (n + 1) * kU * mag;
    out[i] = round_to(r.out, {lo - err, hi + err});
  }
  return out;
}

// One kernel call's output rows against their bounds under the specified rounding, which must
// hold all of them and be tight (few wider than half a bf16 ulp of the value, the least a bf16
// rounding step moves it by; with bf16 outputs, few admit two values), and under each rounding of
// `dropped` (the specified one less a step), which must leave a good share of the outputs
// outside: the check sees every step.
class RoundingCheck {
 public:
  RoundingCheck(AttentionRounding spec, std::vector<AttentionRounding> dropped)
      : spec_(spec), dropped_(std::move(dropped)), outside_dropped_(dropped_.size(), 0) {}

  void row(const float* q, int d, const std::vector<const float*>& keys,
           const std::vector<const float*>& values, int dv, float scale, const float* out,
           const std::string& where) {
    const auto bounds = attention_bounds(q, d, keys, values, dv, scale, spec_);
    for (int i = 0; i < dv; ++i) {
      const Interval& b = bounds[i];
      ++checked_;
      loose_ += b.hi - b.lo > 0x1p-9 * std::max(std::fabs(b.lo), std::fabs(b.hi));
      if (!b.contains(out[i]) && outside_++ < 5) {
        ADD_FAILURE() << where << " dim " << i << ": " << out[i] << " not in [" << b.lo << ", "
                      << b.hi << "]";
      }
    }
    for (size_t w = 0; w < dropped_.size(); ++w) {
      const auto wrong = attention_bounds(q, d, keys, values, dv, scale, dropped_[w]);
      for (int i = 0; i < dv; ++i) outside_dropped_[w] += !wrong[i].contains(out[i]);
    }
  }

  void finish() const {
    EXPECT_EQ(outside_, 0) << "of " << checked_ << " outputs";
    EXPECT_LT(loose_, checked_ / 20) << "the bounds are too wide to check much";
    for (size_t w = 0; w < dropped_.size(); ++w)
      EXPECT_GT(outside_dropped_[w], checked_ / 10)
          << "a kernel without rounding step " << w << " would go unnoticed: only "
          << outside_dropped_[w] << " of " << checked_ << " outputs leave its bounds";
    std::printf("%lld outputs, %lld bounds loose; outside without each step:",
                static_cast<long long>(checked_), static_cast<long long>(loose_));
    for (const int64_t n : outside_dropped_) std::printf(" %lld", static_cast<long long>(n));
    std::printf("\n");
  }

 private:
  AttentionRounding spec_;
  std::vector<AttentionRounding> dropped_;
  std::vector<int64_t> outside_dropped_;
  int64_t checked_ = 0, outside_ = 0, loose_ = 0;
};

}  // namespace kestrel::cpu::test
