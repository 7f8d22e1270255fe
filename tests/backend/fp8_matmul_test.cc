// FP8 (float8_e4m3fn) weights: the code conversions against an independent decoding of the bit
// fields, and linear() with DeepSeek-style block scales on every ISA this CPU has, against float64
// references.
#include "backend/cpu/fp8_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "base/fp16.h"
#include "tensor/fp8.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

// The format definition, in float64: s eeee mmm, bias 7, e = 0 subnormal, 0x7F/0xFF NaN.
double reference_value(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s != 0 ? -mag : mag;
}

bool is_nan_code(int c) {
  return (c & 0x7F) == 0x7F;
}

TEST(Fp8Conversion, EveryCodeMatchesTheFormatDefinition) {
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[size_t(c)] = uint8_t(c);
  std::vector<float> deq(256);
  dequantize_row(DType::F8_E4M3, codes.data(), deq.data(), 256);
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(testing::Message() << "code 0x" << std::hex << c);
    const double want = reference_value(uint8_t(c));
    const float got = fp8_e4m3_to_f32(uint8_t(c));
    if (is_nan_code(c)) {
      EXPECT_TRUE(std::isnan(got));
      EXPECT_TRUE(std::isnan(deq[size_t(c)]));
      continue;
    }
    EXPECT_EQ(double(got), want);
    EXPECT_EQ(std::signbit(got), c >= 0x80);  // -0 for 0x80
    EXPECT_EQ(f32_to_bits(deq[size_t(c)]), f32_to_bits(got));
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);
}

// The SIMD kernels' claim: the f16 bits value · 2^-8 for every finite code, subnormals included.
TEST(Fp8Conversion, F16BitsAreTheValueTimesTwoToTheMinusEight) {
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(testing::Message() << "code 0x" << std::hex << c);
    const uint16_t h = fp8_e4m3_to_f16_scaled(uint8_t(c));
    const float v = f16_to_f32(h);
    if (is_nan_code(c)) {
      EXPECT_EQ(double(v) * kFp8F16Scale, c >= 0x80 ? -480.0 : 480.0);
      continue;
    }
    EXPECT_EQ(double(v) * kFp8F16Scale, reference_value(uint8_t(c)));
    EXPECT_EQ(std::signbit(v), c >= 0x80);
  }
}

// A random [n, k] FP8 weight: every finite code equally likely, and one random scale per block of
// br x bc elements (br = 0: no block scales, every scale 1).
struct Fp8Weights {
  int64_t n, k, br, bc;
  std::vector<uint8_t> codes;
  std::vector<float> scales;

  Fp8Weights(int64_t n_, int64_t k_, int64_t br_, int64_t bc_, uint32_t seed)
      : n(n_), k(k_), br(br_), bc(bc_), codes(size_t(n_ * k_)) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> code(0, 253);  // skips 0x7F and 0xFF
    for (auto& c : codes) {
      const int v = code(rng);
      c = uint8_t(v < 0x7F ? v : v + 1);
    }
    if (br > 0) {
      std::uniform_real_distribution<float> scale(0.5f / 128, 2.0f / 128);
      scales.resize(size_t(((n + br - 1) / br) * blocks_per_row()));
      for (auto& s : scales) s = scale(rng);
    }
  }
  int64_t blocks_per_row() const { return br > 0 ? (k + bc - 1) / bc : 1; }
  LinearWeight tensor() const {
    LinearWeight t{Tensor{codes.data(), DType::F8_E4M3, Shape{n, k}}};
    if (br > 0) {
      t.scales.block = scales.data();
      t.scales.block_rows = br;
      t.scales.block_cols = bc;
    }
    return t;
  }
  // Exact in float64: code (4 significant bits) times scale and x (24 bits each).
  double value(int64_t r, int64_t c) const {
    const double s = br > 0 ? scales[size_t((r / br) * blocks_per_row() + c / bc)] : 1.0;
    return reference_value(codes[size_t(r * k + c)]) * s;
  }
};

// y = x · Wᵀ in float64, and a bound on what f32 accumulation may add: blocks of at most L terms
// summed, scaled and added over B blocks, lanes reduced at the end, is at most (L + B + 8) · 2^-24
// times the sum of |terms| (products and the scaling are exact or rounded once).
struct Reference {
  std::vector<double> y, bound;
};

Reference reference(const Fp8Weights& w, const std::vector<float>& x, int64_t m) {
  const int64_t block_len = w.br > 0 ? w.bc : w.k;
  const double u = std::ldexp(1.0, -24) * double(block_len + w.blocks_per_row() + 8);
  Reference r;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < w.n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t c = 0; c < w.k; ++c) {
        const double t = w.value(j, c) * x[size_t(i * w.k + c)];
        sum += t;
        mag += std::fabs(t);
      }
      r.y.push_back(sum);
      r.bound.push_back(u * mag);
    }
  }
  return r;
}

class Fp8LinearTest : public ::testing::Test {
 protected:
  void TearDown() override { set_linear_isa("auto"); }
};

// Checks linear() on w against the float64 product for every ISA and each M, and that every ISA
// gives the same bits.
void expect_matches_reference(const Fp8Weights& w, std::initializer_list<int64_t> ms, uint32_t seed,
                              ThreadPool& pool) {
  for (int64_t m : ms) {
    const auto x = randn(m * w.k, seed++);
    const Reference ref = reference(w, x, m);
    std::vector<float> y_first;
    for (const auto& isa : available_isas()) {
      SCOPED_TRACE(testing::Message() << isa << " M=" << m << " N=" << w.n << " K=" << w.k
                                      << " blocks " << w.br << "x" << w.bc);
      set_linear_isa(isa.c_str());
      std::vector<float> y(size_t(m * w.n), -1.0f);
      linear(w.tensor(), x.data(), m, y.data(), pool);
      Mismatches bad;
      bad.check(y, ref.y, ref.bound, "vs float64 reference");
      EXPECT_EQ(bad.count, 0) << bad.first;
      // One arithmetic (fp8_matmul.h): every ISA gives the first one's bits.
      if (y_first.empty())
        y_first = y;
      else
        EXPECT_EQ(std::memcmp(y.data(), y_first.data(), y.size() * sizeof(float)), 0);
    }
  }
}

TEST_F(Fp8LinearTest, BlockScalesMatchFloat64ReferenceOnEveryIsa) {
  ThreadPool pool(2);
  uint32_t seed = 200;
  for (int64_t k : {100, 128, 320, 1000}) {
    for (int64_t n : {1, 200}) {
      const Fp8Weights w(n, k, 128, 128, seed++);
      expect_matches_reference(w, {1, 3, 8, 17}, seed, pool);
      seed += 4;
    }
  }
}

// Block shapes other than 128 x 128, including blocks narrower than one vector, and K below
// one vector.
TEST_F(Fp8LinearTest, OddBlockShapesAndLengths) {
  ThreadPool pool(2);
  uint32_t seed = 300;
  const struct {
    int64_t n, k, br, bc;
  } cases[] = {{37, 100, 3, 20}, {9, 45, 4, 7}, {5, 13, 1, 13}, {11, 200, 128, 64}, {6, 3, 2, 1}};
  for (const auto& c : cases) {
    const Fp8Weights w(c.n, c.k, c.br, c.bc, seed++);
    expect_matches_reference(w, {1, 5, 9}, seed, pool);
    seed += 3;
  }
}

TEST_F(Fp8LinearTest, WithoutBlockScaleEveryScaleIsOne) {
  ThreadPool pool(2);
  const Fp8Weights w(33, 300, 0, 0, 400);
  expect_matches_reference(w, {1, 4, 11}, 401, pool);
}

// Batch invariance: a row's output is bit-identical whether it runs alone or in a batch, at any
// position in the activation tiles.
TEST_F(Fp8LinearTest, RowsDoNotDependOnBatch) {
  const int64_t m = 17, n = 70, k = 1000;
  const Fp8Weights w(n, k, 128, 128, 500);
  expect_rows_do_not_depend_on_batch(w.tensor(), randn(m * k, 501), m);
}

TEST_F(Fp8LinearTest, ThreadCountDoesNotChangeResults) {
  const int64_t m = 5, n = 301, k = 320;
  const Fp8Weights w(n, k, 128, 128, 600);
  const auto x = randn(m * k, 601);
  ThreadPool one(1), three(3);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    std::vector<float> a(size_t(m * n)), b(size_t(m * n));
    linear(w.tensor(), x.data(), m, a.data(), one);
    linear(w.tensor(), x.data(), m, b.data(), three);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << isa;
  }
}

// FP8 jobs in a group with other dtypes give, bit for bit, what separate calls give.
TEST_F(Fp8LinearTest, GroupWithOtherDtypesEqualsSeparateCalls) {
  const int64_t k = 320, m = 9;
  const Fp8Weights a(130, k, 128, 128, 700), b(17, k, 128, 128, 701);
  std::vector<uint8_t> q8(dtype_bytes(DType::Q8_0, 40 * k)), f16(dtype_bytes(DType::F16, 23 * k));
  const auto src = randn(63 * k, 702);
  for (int64_t r = 0; r < 40; ++r) {
    quantize_row(DType::Q8_0, src.data() + r * k, q8.data() + r * dtype_bytes(DType::Q8_0, k), k);
  }
  for (int64_t r = 0; r < 23; ++r) {
    quantize_row(DType::F16, src.data() + (40 + r) * k, f16.data() + r * dtype_bytes(DType::F16, k),
                 k);
  }
  const LinearWeight tensors[4] = {
      a.tensor(), LinearWeight{Tensor{q8.data(), DType::Q8_0, Shape{40, k}}}, b.tensor(),
      LinearWeight{Tensor{f16.data(), DType::F16, Shape{23, k}}}};
  const auto x = randn(m * k, 703);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<std::vector<float>> sep(4), grp(4);
      std::vector<LinearJob> jobs;
      for (int i = 0; i < 4; ++i) {
        const int64_t n = tensors[i].rows();
        sep[size_t(i)].assign(size_t(m * n), -1.0f);
        grp[size_t(i)].assign(size_t(m * n), -2.0f);
        linear(tensors[i], x.data(), m, sep[size_t(i)].data(), pool);
        jobs.push_back({&tensors[i], grp[size_t(i)].data()});
      }
      linear_group(jobs, x.data(), m, pool);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(grp[size_t(i)], sep[size_t(i)]) << isa << " job " << i << " threads " << threads;
      }
    }
  }
}

TEST(Fp8LinearDeathTest, RejectsEmptyScaleBlocks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> codes(64, 0x38);
  std::vector<float> x(32, 1.0f), y(2), scale(1, 1.0f);
  ThreadPool pool(1);
  LinearWeight w{Tensor{codes.data(), DType::F8_E4M3, Shape{2, 32}}};
  w.scales.block = scale.data();
  w.scales.block_rows = 128;
  EXPECT_DEATH(linear(w, x.data(), 1, y.data(), pool), "block scale of 128x0");
}

// The FP8 panels (the packed copy a prepared weight gets on AVX2 and AVX-512 CPUs) give the row
// kernels' bits: odd shapes, partial panels and blocks, every batch size up to two activation
// tiles, on every ISA (the scalar one runs the rows).
TEST_F(Fp8LinearTest, PanelsGiveTheRowKernelsBits) {
  ThreadPool pool(2);
  uint32_t seed = 700;
  const struct {
    int64_t n, k, br, bc;
  } cases[] = {{37, 300, 128, 128}, {16, 128, 128, 128}, {5, 45, 4, 7}, {70, 1000, 0, 0}};
  for (const auto& c : cases) {
    const Fp8Weights w(c.n, c.k, c.br, c.bc, seed++);
    for (int64_t m : {1, 3, 6, 9}) {
      const auto x = randn(m * w.k, seed++);
      std::vector<float> rows;
      for (const auto& isa : available_isas()) {
        SCOPED_TRACE(testing::Message() << isa << " M=" << m << " N=" << w.n << " K=" << w.k);
        set_linear_isa(isa.c_str());
        LinearWeight t = w.tensor();
        std::vector<float> y(size_t(m * w.n), -1.0f);
        if (rows.empty()) {
          linear(t, x.data(), m, y.data(), pool);
          rows = y;
        }
        const auto plan = make_linear_plan(t.w, QuantCompute::kInt8, DType::F32);
        ASSERT_NE(plan, nullptr);
        EXPECT_EQ(plan->kernel().packing, isa == "scalar" ? Packing::kNone : Packing::kFp8Panels);
        t.plan = plan.get();
        linear(t, x.data(), m, y.data(), pool);
        EXPECT_EQ(std::memcmp(y.data(), rows.data(), y.size() * sizeof(float)), 0);
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu
