// Float panels (float_panels.h): packing keeps every weight in its panel slot and zero-pads the
// last panel; linear() over packed F32/F16/BF16 weights matches a float64 reference, computes
// every output by the same FMA sequence whatever the batch, tile or thread count (bit-equal to
// the row computed alone), and other ISAs ignore the packed copy.
#include "backend/cpu/float_panels.h"
#include "backend/cpu/linear_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "base/fp16.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {
namespace {

struct FloatWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;            // the weights as stored (after rounding to the dtype)
  std::unique_ptr<uint8_t[]> packed;    // pack_float_weight's copy, for the layout checks
  std::unique_ptr<CpuLinearPlan> plan;  // the float-panel plan linear() runs (AVX-512 only)
  LinearWeight tensor;
};

FloatWeights make_weights(DType t, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  FloatWeights w;
  const size_t es = t == DType::F32 ? 4 : 2;
  w.bytes.resize(size_t(n * k) * es);
  w.values.resize(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i) {
    const float v = normal(rng);
    if (t == DType::F32) {
      std::memcpy(w.bytes.data() + 4 * i, &v, 4);
      w.values[i] = v;
    } else {
      const uint16_t h = t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
      w.values[i] = t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  w.tensor = LinearWeight{Tensor{w.bytes.data(), t, Shape{n, k}}};
  w.packed = pack_float_weight(w.tensor.w);
  w.plan = make_linear_plan(w.tensor.w, Packing::kFloatPanels);
  w.tensor.plan = w.plan.get();
  return w;
}

class FloatPanels : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!packed_weights_supported()) GTEST_SKIP() << "no AVX2 on this CPU";
  }
  void TearDown() override { set_linear_isa("auto"); }
};

TEST_P(FloatPanels, PackKeepsEveryValueAndPadsTheLastPanel) {
  const DType t = GetParam();
  const int64_t n = 21, k = 13;
  const FloatWeights w = make_weights(t, n, k, 1);
  const size_t es = t == DType::F32 ? 4 : 2;
  for (int64_t r = 0; r < packed_panels(n) * kPanelRows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t* slot = w.packed.get() + (r / kPanelRows) * float_panel_bytes(t, k) +
                            (i * kPanelRows + r % kPanelRows) * es;
      if (r >= n) {
        for (size_t b = 0; b < es; ++b) ASSERT_EQ(slot[b], 0) << "padding row " << r;
        continue;
      }
      ASSERT_EQ(std::memcmp(slot, w.bytes.data() + (r * k + i) * es, es), 0)
          << "row " << r << " element " << i;
    }
  }
}

TEST_P(FloatPanels, MatchesAFloat64Reference) {
  const DType t = GetParam();
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (int64_t k : {1, 37, 256, 600}) {  // 600: more than one K chunk
    for (int64_t n : {1, 16, 33}) {
      const FloatWeights w = make_weights(t, n, k, seed++);
      for (int64_t m : {1, 5, 13, 16, 17, 40}) {  // ≤ 16: one row tile; 40: widened once
        const auto x = randn(m * k, seed++);
        std::vector<float> y(size_t(m * n), -1.0f);
        linear(w.tensor, x.data(), m, y.data(), pool);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              ref += double(w.values[j * k + i]) * x[r * k + i];
              mag += std::fabs(double(w.values[j * k + i]) * x[r * k + i]);
            }
            ASSERT_NEAR(y[r * n + j], ref, 1e-6 * mag + 1e-6)
                << dtype_name(t) << " K=" << k << " N=" << n << " M=" << m << " row " << r;
          }
        }
      }
    }
  }
}

TEST_P(FloatPanels, RowsDoNotDependOnBatchOrThreads) {
  const int64_t m = 37, n = 70, k = 520;  // the batch widens its weights, a single row not
  const FloatWeights w = make_weights(GetParam(), n, k, 3);
  const auto x = randn(m * k, 4);
  ThreadPool two(2), three(3);
  std::vector<float> all(m * n), all3(m * n), one(n);
  linear(w.tensor, x.data(), m, all.data(), two);
  linear(w.tensor, x.data(), m, all3.data(), three);
  EXPECT_EQ(std::memcmp(all.data(), all3.data(), all.size() * sizeof(float)), 0);
  for (int64_t r = 0; r < m; ++r) {
    linear(w.tensor, x.data() + r * k, 1, one.data(), two);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + r * n, n * sizeof(float)), 0) << "row " << r;
  }
  // Batches of one row tile (transposed activations) against the six-row tiles of the 37.
  for (int64_t rows : {2, 7, 12, 15, 16, 17}) {
    std::vector<float> part(size_t(rows * n));
    linear(w.tensor, x.data(), rows, part.data(), two);
    ASSERT_EQ(std::memcmp(part.data(), all.data(), part.size() * sizeof(float)), 0)
        << rows << " rows";
  }
}

// One arithmetic for float weights (float_panels.h): the AVX-512 and AVX2 panel GEMMs and the
// scalar row kernel (what a planned weight runs with the ISA capped to scalar) give the same
// bits, for batches of every size and partial panels.
TEST_P(FloatPanels, EveryIsaGivesThePanelsBits) {
  const int64_t n = 37, k = 48;
  FloatWeights w = make_weights(GetParam(), n, k, 5);
  ASSERT_NE(w.plan, nullptr) << "AVX2 and AVX-512 both have the float panel GEMM";
  LinearWeight plain = w.tensor;
  plain.plan = nullptr;
  ThreadPool pool(2);
  for (int64_t m : {1, 3, 5, 16, 17, 40}) {
    const auto x = randn(m * k, uint32_t(6 + m));
    std::vector<float> first;
    for (const auto& isa : available_isas()) {
      set_linear_isa(isa.c_str());
      std::vector<float> y(size_t(m * n), -1.0f);
      linear(w.tensor, x.data(), m, y.data(), pool);
      if (first.empty()) first = y;
      EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0)
          << isa << " M=" << m;
    }
    set_linear_isa("scalar");
    std::vector<float> rows(size_t(m * n), -2.0f);
    linear(plain, x.data(), m, rows.data(), pool);
    EXPECT_EQ(std::memcmp(first.data(), rows.data(), rows.size() * sizeof(float)), 0)
        << "scalar rows M=" << m;
    set_linear_isa("auto");
  }
}

INSTANTIATE_TEST_SUITE_P(Types, FloatPanels, testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kestrel::cpu
