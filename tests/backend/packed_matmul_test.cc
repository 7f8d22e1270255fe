// Packed weights (packed_matmul.h): the activation quantizer gives quantize_row_q8_0's codes
// and scales in pair order with exact sums; packing keeps every weight value; and linear() over
// packed Q4_0/Q4_1/Q8_0 weights equals the dequantized weights times the quantized activations
// (f32 rounding aside), does not depend on the batch or the thread count, and gives the same
// numbers whichever ISA is forced (the packed copy is then ignored).
#include "backend/cpu/packed_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant.h"
#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

int pair_offset(int h, int e) {
  return e < 16 ? h * 16 + e : 32 + h * 16 + (e - 16);
}

TEST(PackedActivation, SameCodesAsQ8_0InPairOrder) {
  const int64_t k = 192;
  auto x = randn(k, 1, 3.0f);
  // Exact halves exercise round-half-away-from-zero; a zero block gives d = 0.
  x[5] = 0.5f * (x[0] > 0 ? 1.0f : -1.0f);
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;
  x[100] = 127.0f;
  x[101] = 63.5f;
  x[102] = -0.5f;
  std::vector<BlockQ8_0> ref(k / 32);
  quantize_row_q8_0(x.data(), ref.data(), k);
  std::vector<uint8_t> packed(packed_activation_row_bytes(k));
  quantize_row_packed(x.data(), packed.data(), k);
  constexpr int64_t kPair = kPackedActivationPairBytes;
  const auto* sums = reinterpret_cast<const float*>(packed.data() + (k / 64) * kPair);
  for (int64_t b = 0; b < k / 32; ++b) {
    const int h = int(b % 2);
    int sum = 0;
    for (int e = 0; e < 32; ++e) {
      const auto code = int8_t(packed[(b / 2) * kPair + pair_offset(h, e)]);
      ASSERT_EQ(code, ref[b].qs[e]) << "block " << b << " element " << e;
      sum += code;
    }
    const float d = f16_to_f32(ref[b].d);
    const auto* lanes = reinterpret_cast<const float*>(packed.data() + (b / 2) * kPair + 64);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(lanes[4 * h + i], d);
      EXPECT_EQ(lanes[8 + 4 * h + i], d);
    }
    EXPECT_EQ(sums[b], d * float(sum));
  }
}

struct PackedWeights {
  std::vector<uint8_t> bytes;
  std::unique_ptr<uint8_t[]> packed;
  Tensor tensor;
};

PackedWeights make_packed(DType t, int64_t n, int64_t k, uint32_t seed) {
  PackedWeights w;
  w.bytes.resize(dtype_bytes(t, n * k));
  const auto src = randn(n * k, seed);
  for (int64_t r = 0; r < n; ++r)
    quantize_row(t, src.data() + r * k, w.bytes.data() + r * dtype_bytes(t, k), k);
  w.tensor = Tensor{w.bytes.data(), t, Shape{n, k}};
  w.packed = pack_weight(w.tensor);
  w.tensor.packed = w.packed.get();
  return w;
}

TEST(PackWeight, KeepsEveryValue) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    const int64_t n = 3, k = 1088;  // 17 pairs: the last sixteen-block chunk is partial
    const PackedWeights w = make_packed(t, n, k, 7);
    const size_t stride = packed_weight_row_bytes(t, k);
    const size_t codes = t == DType::Q8_0 ? size_t(k) : size_t(k) / 2;
    std::vector<float> deq(k);
    for (int64_t r = 0; r < n; ++r) {
      dequantize_row(t, w.tensor.row(r), deq.data(), k);
      const uint8_t* row = w.packed.get() + r * stride;
      const auto* d = reinterpret_cast<const uint16_t*>(row + codes);
      const uint16_t* m = d + k / 32;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t b = i / 32, e = i % 32, h = b % 2;
        int u;
        if (t == DType::Q8_0) {
          u = row[(b / 2) * 64 + pair_offset(int(h), int(e))];
        } else {
          const uint8_t byte = row[(b / 2) * 32 + h * 16 + e % 16];
          u = e < 16 ? byte & 0xF : byte >> 4;
        }
        const float db = f16_to_f32(d[b]);
        const float mb = t == DType::Q4_1   ? f16_to_f32(m[b])
                         : t == DType::Q4_0 ? -8 * db
                                            : -128 * db;
        ASSERT_FLOAT_EQ(db * float(u) + mb, deq[i])
            << dtype_name(t) << " row " << r << " element " << i;
      }
    }
  }
}

TEST(PackWeight, OnlyWholePairsOfSupportedTypes) {
  std::vector<uint8_t> bytes(4096);
  EXPECT_TRUE(packable(Tensor{bytes.data(), DType::Q4_1, Shape{2, 64}}));
  EXPECT_FALSE(packable(Tensor{bytes.data(), DType::Q4_1, Shape{2, 96}}));
  EXPECT_FALSE(packable(Tensor{bytes.data(), DType::Q4_K, Shape{2, 256}}));
  EXPECT_FALSE(packable(Tensor{bytes.data(), DType::F16, Shape{2, 64}}));
}

class PackedLinear : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!packed_weights_supported()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  }
  void TearDown() override { set_linear_isa("auto"); }
};

TEST_P(PackedLinear, EqualsDequantizedWeightsTimesQuantizedActivations) {
  const DType t = GetParam();
  ThreadPool pool(2);
  uint32_t seed = 40;
  for (int64_t k : {64, 576, 1088}) {
    for (int64_t n : {1, 7, 33}) {
      const PackedWeights w = make_packed(t, n, k, seed++);
      std::vector<float> deq(n * k);
      for (int64_t r = 0; r < n; ++r) dequantize_row(t, w.tensor.row(r), deq.data() + r * k, k);
      for (int64_t m : {1, 3, 8, 9, 20}) {
        const auto x = randn(m * k, seed++);
        std::vector<float> y(m * n, -1.0f);
        linear(w.tensor, x.data(), m, y.data(), pool);
        for (int64_t i = 0; i < m; ++i) {
          std::vector<BlockQ8_0> q(k / 32);
          quantize_row_q8_0(x.data() + i * k, q.data(), k);
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t l = 0; l < k; ++l) {
              const double xq = double(f16_to_f32(q[l / 32].d)) * q[l / 32].qs[l % 32];
              ref += deq[j * k + l] * xq;
              mag += std::fabs(deq[j * k + l] * xq);
            }
            // The unsigned codes make partial sums larger than the result (Q8_0: by 128·Σx).
            ASSERT_NEAR(y[i * n + j], ref, 3e-6 * mag + 1e-6)
                << dtype_name(t) << " K=" << k << " N=" << n << " M=" << m << " row " << i;
          }
        }
      }
    }
  }
}

TEST_P(PackedLinear, RowsDoNotDependOnBatchOrThreads) {
  const int64_t m = 19, n = 37, k = 576;
  const PackedWeights w = make_packed(GetParam(), n, k, 3);
  const auto x = randn(m * k, 4);
  ThreadPool two(2), three(3);
  std::vector<float> all(m * n), all3(m * n), one(n);
  linear(w.tensor, x.data(), m, all.data(), two);
  linear(w.tensor, x.data(), m, all3.data(), three);
  EXPECT_EQ(all, all3);
  for (int64_t i = 0; i < m; ++i) {
    linear(w.tensor, x.data() + i * k, 1, one.data(), two);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)), 0) << "row " << i;
  }
}

TEST_P(PackedLinear, OtherIsasIgnoreThePackedCopy) {
  const int64_t m = 5, n = 9, k = 256;
  PackedWeights w = make_packed(GetParam(), n, k, 5);
  const auto x = randn(m * k, 6);
  ThreadPool pool(1);
  Tensor plain = w.tensor;
  plain.packed = nullptr;
  for (const char* isa : {"avx2", "scalar"}) {
    set_linear_isa(isa);
    std::vector<float> a(m * n), b(m * n);
    linear(w.tensor, x.data(), m, a.data(), pool);
    linear(plain, x.data(), m, b.data(), pool);
    EXPECT_EQ(a, b) << isa;
  }
  set_linear_isa("auto");
  std::vector<float> packed(m * n), unpacked(m * n);
  linear(w.tensor, x.data(), m, packed.data(), pool);
  linear(plain, x.data(), m, unpacked.data(), pool);
  EXPECT_NE(packed, unpacked);  // the packed kernels really ran
  for (size_t i = 0; i < packed.size(); ++i)
    EXPECT_NEAR(packed[i], unpacked[i], 2e-2 * (1 + std::fabs(unpacked[i])));
}

INSTANTIATE_TEST_SUITE_P(Types, PackedLinear,
                         testing::Values(DType::Q4_0, DType::Q4_1, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kestrel::cpu
