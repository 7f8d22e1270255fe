// BF16 tiles (bf16_tiles.h): packing puts every weight in its tile slot and zero-pads K and the
// last panel; linear() over them equals the float64 sum of bf16-rounded activations times the
// weights, and each output is the same bits whatever the batch or thread count.
#include "backend/cpu/bf16_tiles.h"
#include "backend/cpu/linear_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "base/fp16.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {
namespace {

struct Weights {
  std::vector<uint16_t> bits;
  std::unique_ptr<uint8_t[]> packed;    // pack_bf16_tiles' copy, for the layout checks
  std::unique_ptr<CpuLinearPlan> plan;  // the bf16-tile plan linear() runs (AMX only)
  LinearWeight tensor;
};

Weights make_weights(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Weights w;
  w.bits.resize(size_t(n * k));
  for (auto& b : w.bits) b = f32_to_bf16(normal(rng));
  w.tensor = LinearWeight{Tensor{w.bits.data(), DType::BF16, Shape{n, k}}};
  w.packed = pack_bf16_tiles(w.tensor.w);
  w.plan = make_linear_plan(w.tensor.w, Packing::kBf16Tiles);
  w.tensor.plan = w.plan.get();
  return w;
}

class Bf16Tiles : public testing::Test {
 protected:
  void SetUp() override {
    if (std::string(linear_isa()) != "avx512" || !bf16_tiles_supported())
      GTEST_SKIP() << "no AVX-512 with AMX-BF16 on this CPU or kernel";
  }
};

TEST_F(Bf16Tiles, PackPutsEveryWeightInItsSlotAndPads) {
  const int64_t n = 19, k = 45;
  const Weights w = make_weights(n, k, 1);
  const auto* packed = reinterpret_cast<const uint16_t*>(w.packed.get());
  const size_t panel = bf16_tile_panel_bytes(k) / 2;
  ASSERT_EQ(panel, size_t(2 * 16 * 32));  // two blocks of 32
  for (int64_t r = 0; r < 32; ++r) {
    for (int64_t i = 0; i < 64; ++i) {
      const int64_t b = i / 32, e = i % 32;
      const uint16_t got = packed[(r / 16) * panel + b * 512 + (e / 2) * 32 + 2 * (r % 16) + e % 2];
      const uint16_t want = r < n && i < k ? w.bits[r * k + i] : 0;
      ASSERT_EQ(got, want) << "row " << r << " element " << i;
    }
  }
}

TEST_F(Bf16Tiles, MatchesBf16ActivationsTimesWeightsInFloat64) {
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (int64_t k : {1, 31, 64, 600}) {
    for (int64_t n : {1, 17, 40}) {
      const Weights w = make_weights(n, k, seed++);
      for (int64_t m : {1, 3, 16, 21}) {
        const auto x = randn(m * k, seed++);
        std::vector<float> y(size_t(m * n), -1.0f);
        linear(w.tensor, x.data(), m, y.data(), pool);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              const double p =
                  double(bf16_to_f32(f32_to_bf16(x[r * k + i]))) * bf16_to_f32(w.bits[j * k + i]);
              ref += p;
              mag += std::fabs(p);
            }
            ASSERT_NEAR(y[r * n + j], ref, 1e-6 * mag + 1e-6)
                << "K=" << k << " N=" << n << " M=" << m << " row " << r << " col " << j;
          }
        }
      }
    }
  }
}

TEST_F(Bf16Tiles, RowsDoNotDependOnBatchOrThreads) {
  const int64_t m = 37, n = 70, k = 200;
  const Weights w = make_weights(n, k, 3);
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
}

}  // namespace
}  // namespace kestrel::cpu
