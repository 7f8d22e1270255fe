// Backend conformance of the scaling, gating and copying ops (max_abs, scale, softcap,
// sigmoid_mul, copy_rows): on every ISA, against float64 references within each activation dtype's
// rounding, and bit-identical between a 1-thread and a 2-thread backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_conformance.h"

namespace kestrel::conformance {
namespace {

class GatingConformance : public ConformanceTest {};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr DType kActs[] = {DType::F32, DType::BF16, DType::F16};

// Counts values off `want` by more than rel·|want| + abs and names the first.
::testing::AssertionResult within(const std::vector<float>& got, const std::vector<double>& want,
                                  double rel, double abs = 0.0) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]) + abs) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " off, the first " << first
                                       << ": " << got[first] << " want " << want[first];
}

// A maximum of magnitudes is exact: the largest |x| bit for bit, over chunks of any split, with
// NaNs passed over and 0 for no values.
TEST_F(GatingConformance, MaxAbs) {
  std::mt19937 rng(20);
  const int64_t n = 20011;  // several of the op's chunks, the last one short
  std::vector<float> x = randn(size_t(n), rng, 0.0f, 3.0f);
  x[size_t(n) - 7] = -1000.5f;  // the largest magnitude, negative and in the last chunk
  x[5] = kNaN;
  x[9000] = kNaN;
  double want = 0.0;
  for (const float v : x)
    if (!std::isnan(v)) want = std::max(want, std::fabs(double(v)));
  ASSERT_EQ(want, 1000.5);
  for_each_isa([&](const std::string&) {
    EXPECT_EQ(one->max_abs(x.data(), n), float(want));
    EXPECT_EQ(two->max_abs(x.data(), n), float(want));
    EXPECT_EQ(two->max_abs(x.data(), 3),
              float(std::max({std::fabs(x[0]), std::fabs(x[1]), std::fabs(x[2])})));
    EXPECT_EQ(two->max_abs(x.data(), 0), 0.0f);
  });
}

// x·f is exact in float64, so the op must give its f32 rounding, rounded to act: bit for bit.
TEST_F(GatingConformance, Scale) {
  std::mt19937 rng(21);
  const int64_t n = 20011;  // past the parallel grain, not a whole number of vectors
  const std::vector<float> x = randn(size_t(n), rng, 0.0f, 3.0f);
  const float f = 45.254833f;
  for (const DType act : kActs) {
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      want[i] = cpu::test::rounded(act, float(double(x[i]) * f));
    for_each_isa([&](const std::string&) {
      std::vector<float> s1 = x, s2 = x;
      one->scale(s1.data(), n, f, act);
      two->scale(s2.data(), n, f, act);
      EXPECT_TRUE(same_bits(s1, s2)) << dtype_name(act);
      EXPECT_TRUE(same_bits(s2, want)) << dtype_name(act);
    });
  }
}

// c·tanh(x / c): each of the three steps rounds once (relative u of act), tanhf is within two
// ulps, and tanh passes a relative error of its argument on at most undiminished
// (a·sech²(a) / tanh(a) ≤ 1); f16's subnormals add their half step at each, scaled by cap.
TEST_F(GatingConformance, Softcap) {
  std::mt19937 rng(22);
  const int64_t n = 20011;
  const std::vector<float> x = randn(size_t(n), rng, 0.0f, 40.0f);
  const float cap = 30.0f;
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = cap * std::tanh(double(x[i]) / cap);
  for (const DType act : kActs) {
    for_each_isa([&](const std::string&) {
      std::vector<float> s1 = x, s2 = x;
      one->softcap(s1.data(), n, cap, act);
      two->softcap(s2.data(), n, cap, act);
      EXPECT_TRUE(same_bits(s1, s2)) << dtype_name(act);
      EXPECT_TRUE(within(s2, want, 3 * unit(act) + 8 * kU, (2 * cap + 1) * tiny(act)))
          << dtype_name(act);
      EXPECT_TRUE(rounded_to(act, s2));
    });
  }
}

// x·σ(g): g rounded to act first (exact in the reference), σ (expf, a few ulps) and the product
// each rounded once (below f16's normal range by half a subnormal step, the gate's scaled by |x|
// < 16). A gate per value and a gate per row.
TEST_F(GatingConformance, SigmoidMul) {
  std::mt19937 rng(23);
  const int64_t rows = 301, dim = 67;  // rows split over the threads
  const std::vector<float> x = randn(size_t(rows * dim), rng, 0.0f, 2.0f);
  for (const int64_t gate_dim : {dim, int64_t(1)}) {
    const std::vector<float> g = randn(size_t(rows * gate_dim), rng, 0.0f, 4.0f);
    for (const DType act : kActs) {
      std::vector<double> want(x.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim; ++i) {
          const double gate =
              cpu::test::rounded(act, g[size_t(r * gate_dim + (gate_dim == 1 ? 0 : i))]);
          want[size_t(r * dim + i)] = x[size_t(r * dim + i)] / (1 + std::exp(-gate));
        }
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message() << dtype_name(act) << " gate_dim " << gate_dim);
        std::vector<float> s1 = x, s2 = x;
        one->sigmoid_mul(s1.data(), g.data(), rows, dim, gate_dim, act);
        two->sigmoid_mul(s2.data(), g.data(), rows, dim, gate_dim, act);
        EXPECT_TRUE(same_bits(s1, s2));
        EXPECT_TRUE(within(s2, want, 2 * unit(act) + 8 * kU, 17 * tiny(act)));
        EXPECT_TRUE(rounded_to(act, s2));
      });
    }
  }
}

// Several copies in one call — a plain strided copy, blocks per row (a regroup by head), and a
// gather by row index — each value landing exactly where the definition says, nothing else
// written, on one thread and two.
TEST_F(GatingConformance, CopyRows) {
  std::mt19937 rng(24);
  const int64_t T = 203, heads = 3, width = 37;
  const std::vector<float> src = randn(size_t(T * heads * 2 * width), rng);
  std::vector<int32_t> pick(50);
  for (int32_t& p : pick) p = int32_t(rng() % T);
  // Reference: the definition's loops.
  auto run = [&](Backend& be, std::vector<float>& a, std::vector<float>& b, std::vector<float>& c) {
    const RowCopy copies[3] = {
        // Every row's second half of each head, heads side by side: [T, heads, width].
        {.src = src.data() + width,
         .dst = a.data(),
         .rows = T,
         .width = width,
         .blocks = heads,
         .src_row = heads * 2 * width,
         .dst_row = heads * width,
         .src_block = 2 * width,
         .dst_block = width},
        // Head 1's first half of each row into every other row of b.
        {.src = src.data() + 2 * width,
         .dst = b.data(),
         .rows = T,
         .width = width,
         .src_row = heads * 2 * width,
         .dst_row = 2 * width},
        // Whole rows picked by index.
        {.src = src.data(),
         .dst = c.data(),
         .rows = int64_t(pick.size()),
         .width = heads * 2 * width,
         .src_row = heads * 2 * width,
         .dst_row = heads * 2 * width,
         .src_rows = pick.data()}};
    be.copy_rows(copies);
  };
  std::vector<float> a_want(size_t(T * heads * width)), b_want(size_t(T * 2 * width), kNaN);
  std::vector<float> c_want(pick.size() * size_t(heads * 2 * width));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < width; ++i) {
        a_want[size_t((t * heads + h) * width + i)] =
            src[size_t((t * heads + h) * 2 * width + width + i)];
        if (h == 1)
          b_want[size_t(t * 2 * width + i)] = src[size_t((t * heads + h) * 2 * width + i)];
      }
  }
  for (size_t r = 0; r < pick.size(); ++r)
    for (int64_t i = 0; i < heads * 2 * width; ++i)
      c_want[r * size_t(heads * 2 * width) + size_t(i)] =
          src[size_t(pick[r] * heads * 2 * width + i)];
  for_each_isa([&](const std::string&) {
    for (Backend* be : {one.get(), two.get()}) {
      std::vector<float> a(a_want.size(), kNaN), b(b_want.size(), kNaN), c(c_want.size(), kNaN);
      run(*be, a, b, c);
      EXPECT_TRUE(same_bits(a, a_want));
      EXPECT_TRUE(same_bits(b, b_want)) << "rows written outside the copy";
      EXPECT_TRUE(same_bits(c, c_want));
    }
  });
}

}  // namespace
}  // namespace kestrel::conformance
