// I8 weights with one scale per row (msModelSlim W8A8_DYNAMIC and W8A8): linear() against a
// float64 evaluation of the same quantized math (the activation codes recomputed here from the
// scheme's definition), on every ISA this CPU has; every ISA gives the same bits, a row's output
// does not depend on its batch, and a static scheme's codes clamp to [-128, 127].
#include "backend/cpu/int8_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"

namespace kestrel::cpu {
namespace {

struct Int8Weights {
  int64_t n, k;
  std::vector<int8_t> codes;
  std::vector<float> scale;
  std::vector<int32_t> bias;
  float act_scale = 0.0f, act_offset = 0.0f;  // 0: per-token dynamic
  bool int4 = false;                          // codes in [-8, 7], packed as int4 panels
  Int8Weights(int64_t n, int64_t k, uint32_t seed, bool static_act = false, bool int4 = false)
      : n(n), k(k), int4(int4) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> code(int4 ? -8 : -128, int4 ? 7 : 127);
    std::uniform_real_distribution<float> s(0.001f, 0.02f);
    for (int64_t i = 0; i < n * k; ++i) codes.push_back(int8_t(code(rng)));
    for (int64_t j = 0; j < n; ++j) scale.push_back(s(rng));
    if (static_act) {
      std::uniform_int_distribution<int32_t> b(-50000, 50000);
      for (int64_t j = 0; j < n; ++j) bias.push_back(b(rng));
      act_scale = 0.02f;
      act_offset = 3.0f;
    }
  }
  std::shared_ptr<CpuLinearPlan> plan;  // pack(): the packed GEMM's plan, with its copy
  void pack() {
    plan = make_linear_plan(tensor(), int4 ? Packing::kInt4Panels : Packing::kInt8Panels);
    ASSERT_NE(plan, nullptr) << "no int8 GEMM at " << linear_isa();
  }
  Tensor tensor() const { return Tensor{codes.data(), DType::I8, Shape{n, k}}; }
  LinearWeight weight() const {
    WeightScales s;
    s.block = scale.data();
    s.block_rows = 1;
    s.block_cols = k;
    s.act_scale = act_scale;
    s.act_offset = act_offset;
    s.row_bias = bias.empty() ? nullptr : bias.data();
    LinearWeight w{tensor(), s};
    w.plan = plan.get();
    return w;
  }
};

// The scheme's math in float64 from its definition: per token a = max|x| / 127 and q =
// round-half-even(x / a), or q = clamp(round(x / s + offset)) with a = 1; y = (Σ q·w + bias)·a·s_w.
// The codes come from f32 x / a as the kernel computes it (a code is an integer either way).
std::vector<double> reference(const Int8Weights& w, const std::vector<float>& x, int64_t m) {
  std::vector<double> y;
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x.data() + r * w.k;
    float a = 1.0f;
    std::vector<double> q(size_t(w.k));
    if (w.act_scale == 0.0f) {
      float amax = 0.0f;
      for (int64_t i = 0; i < w.k; ++i) amax = std::max(amax, std::fabs(xr[i]));
      a = amax / 127.0f;
      for (int64_t i = 0; i < w.k; ++i) q[size_t(i)] = std::nearbyint(xr[i] / a);
    } else {
      for (int64_t i = 0; i < w.k; ++i)
        q[size_t(i)] =
            std::clamp(double(std::nearbyint(xr[i] / w.act_scale + w.act_offset)), -128.0, 127.0);
    }
    for (int64_t j = 0; j < w.n; ++j) {
      double sum = w.bias.empty() ? 0.0 : w.bias[size_t(j)];
      for (int64_t i = 0; i < w.k; ++i) sum += q[size_t(i)] * w.codes[size_t(j * w.k + i)];
      y.push_back(sum * double(a) * double(w.scale[size_t(j)]));
    }
  }
  return y;
}

class Int8LinearTest : public ::testing::Test {
 protected:
  void TearDown() override { set_linear_isa("auto"); }
};

// With `packed`, the weights carry the packed GEMMs' copy (AVX-512 and AVX2 run it; scalar reads
// the plain rows): the same float64 agreement and the same bits on every ISA.
TEST_F(Int8LinearTest, MatchesFloat64OfTheSameQuantizedMathOnEveryIsa) {
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (bool packed : {false, true})
    for (bool static_act : {false, true})
      for (int64_t k : {5, 64, 200, 1000})
        for (int64_t n : {1, 37}) {
          Int8Weights w(n, k, seed++, static_act);
          if (packed) w.pack();
          for (int64_t m : {1, 3, 9, 17}) {
            const auto x = randn(m * k, seed++);
            const std::vector<double> want = reference(w, x, m);
            std::vector<double> bound;
            // The sum is exact; the two float products round twice (and float(sum) once).
            for (double v : want) bound.push_back(4e-7 * std::fabs(v) + 1e-30);
            std::vector<float> first;
            for (const auto& isa : available_isas()) {
              SCOPED_TRACE(testing::Message()
                           << isa << " packed " << packed << " static " << static_act << " M=" << m
                           << " N=" << n << " K=" << k);
              set_linear_isa(isa.c_str());
              std::vector<float> y(size_t(m * n), -1.0f);
              linear(w.weight(), x.data(), m, y.data(), pool);
              Mismatches bad;
              bad.check(y, want, bound, "vs float64");
              EXPECT_EQ(bad.count, 0) << bad.first;
              if (first.empty()) first = y;
              EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0)
                  << "another ISA's bits";
            }
          }
        }
}

TEST_F(Int8LinearTest, RowsDoNotDependOnBatch) {
  Int8Weights w(70, 300, 90);
  expect_rows_do_not_depend_on_batch(w.weight(), randn(19 * 300, 91), 19);
  w.pack();
  expect_rows_do_not_depend_on_batch(w.weight(), randn(19 * 300, 92), 19);
}

// AMX (batches from a few rows) and VNNI must agree bit for bit, and with the float64 math:
// several 64-column chunks, a last partial one, partial panels and partial row tiles.
TEST_F(Int8LinearTest, AmxAndVnniGiveTheSameBits) {
  if (!packed_amx_active() || amx_int8_gemm() == nullptr)
    GTEST_SKIP() << "no AMX on this CPU or kernel";
  ThreadPool pool(2);
  uint32_t seed = 300;
  for (bool static_act : {false, true})
    for (int64_t k : {5, 64, 96, 1000, 4100})
      for (int64_t n : {5, 16, 37, 70}) {
        Int8Weights w(n, k, seed++, static_act);
        w.pack();
        for (int64_t m : {8, 16, 17, 33, 40}) {
          SCOPED_TRACE(testing::Message()
                       << "static " << static_act << " K=" << k << " N=" << n << " M=" << m);
          const auto x = randn(m * k, seed++);
          std::vector<float> amx(size_t(m * n), -1.0f), vnni(size_t(m * n), -2.0f);
          set_packed_amx(true);
          linear(w.weight(), x.data(), m, amx.data(), pool);
          set_packed_amx(false);
          linear(w.weight(), x.data(), m, vnni.data(), pool);
          set_packed_amx(true);
          ASSERT_EQ(std::memcmp(amx.data(), vnni.data(), amx.size() * sizeof(float)), 0);
          const std::vector<double> want = reference(w, x, m);
          std::vector<double> bound;
          for (double v : want) bound.push_back(4e-7 * std::fabs(v) + 1e-30);
          Mismatches bad;
          bad.check(amx, want, bound, "vs float64");
          EXPECT_EQ(bad.count, 0) << bad.first;
        }
      }
}

// Int4 codes (W4A8, widened at load) packed at half the bytes: the same bits as the row kernel
// on the plain codes, and as float64, through VNNI (decode), AMX (batches) and AVX2; partial
// chunks, panels and row tiles.
TEST_F(Int8LinearTest, Int4PanelsGiveTheInt8Bits) {
  ThreadPool pool(2);
  uint32_t seed = 500;
  for (bool static_act : {false, true})
    for (int64_t k : {5, 64, 100, 1000})
      for (int64_t n : {3, 16, 37}) {
        Int8Weights plain(n, k, seed, static_act, true), w(n, k, seed, static_act, true);
        ++seed;
        ASSERT_TRUE(fits_int4(w.tensor()));
        w.pack();
        EXPECT_EQ(int4_packed_panel_bytes(k) - 64, (int8_packed_panel_bytes(k) - 64) / 2);
        for (int64_t m : {1, 3, 8, 17, 33}) {
          SCOPED_TRACE(testing::Message()
                       << "static " << static_act << " K=" << k << " N=" << n << " M=" << m);
          const auto x = randn(m * k, seed++);
          std::vector<float> rows(size_t(m * n)), vnni(rows.size(), -1.0f), amx(rows.size()),
              avx2(rows.size(), -3.0f);
          set_linear_isa("scalar");
          linear(plain.weight(), x.data(), m, rows.data(), pool);
          set_linear_isa("avx2");
          linear(w.weight(), x.data(), m, avx2.data(), pool);
          set_linear_isa("auto");
          set_packed_amx(false);
          linear(w.weight(), x.data(), m, vnni.data(), pool);
          set_packed_amx(true);
          linear(w.weight(), x.data(), m, amx.data(), pool);
          EXPECT_EQ(std::memcmp(rows.data(), vnni.data(), rows.size() * sizeof(float)), 0);
          EXPECT_EQ(std::memcmp(rows.data(), amx.data(), rows.size() * sizeof(float)), 0);
          EXPECT_EQ(std::memcmp(rows.data(), avx2.data(), rows.size() * sizeof(float)), 0);
          const std::vector<double> want = reference(w, x, m);
          std::vector<double> bound;
          for (double v : want) bound.push_back(4e-7 * std::fabs(v) + 1e-30);
          Mismatches bad;
          bad.check(vnni, want, bound, "vs float64");
          EXPECT_EQ(bad.count, 0) << bad.first;
        }
      }
  Int8Weights wide(4, 64, 1);
  EXPECT_FALSE(fits_int4(wide.tensor()));
}

TEST(Int8Activations, DynamicAndStaticCodes) {
  Int8Weights w(1, 6, 1);
  const float x[6] = {0.5f, -2.54f, 1.27f, 0.0f, 2.54f, -0.01f};
  std::vector<uint8_t> row(int8_activation_row_bytes(6));
  quantize_int8_row(w.weight().scales, x, 6, row.data());
  float a;
  std::memcpy(&a, row.data(), sizeof a);
  EXPECT_FLOAT_EQ(a, 2.54f / 127.0f);
  const uint8_t* q = row.data() + kInt8ActHeaderBytes;
  const int want[6] = {25, -127, 64, 0, 127, 0};  // 0.5 / 0.02 = 25, 1.27 / 0.02 = 63.5 -> 64
  for (int i = 0; i < 6; ++i) EXPECT_EQ(int(q[i]) - 128, want[i]) << i;
  // Static: round(x / 0.01 + 3), clamped.
  w.act_scale = 0.01f;
  w.act_offset = 3.0f;
  quantize_int8_row(w.weight().scales, x, 6, row.data());
  std::memcpy(&a, row.data(), sizeof a);
  EXPECT_EQ(a, 1.0f);
  const int want_static[6] = {53, -128, 127, 3, 127, 2};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(int(q[i]) - 128, want_static[i]) << i;
  // An all-zero row: codes 0, scale 0, no NaN.
  const float zeros[6] = {};
  w.act_scale = 0.0f;
  quantize_int8_row(w.weight().scales, zeros, 6, row.data());
  std::memcpy(&a, row.data(), sizeof a);
  EXPECT_EQ(a, 0.0f);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(int(q[i]), 128);
}

}  // namespace
}  // namespace kestrel::cpu
