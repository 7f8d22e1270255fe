// Packed weights (packed_matmul.h): the activation quantizer gives quantize_row_q8_0's codes
// and scales in group order with exact sums; packing keeps every weight value; and linear() over
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
#include "base/fp16.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

// Group of each block of a row of nb blocks: {first block of its group, group size}.
std::vector<std::pair<int64_t, int>> groups_of(int64_t nb) {
  std::vector<std::pair<int64_t, int>> out(nb);
  for (int64_t first = 0; first < nb;) {
    const int g = packed_group_blocks(nb, first);
    for (int b = 0; b < g; ++b) out[first + b] = {first, g};
    first += g;
  }
  return out;
}

TEST(PackedLayout, GroupsAreLargestFirstAndCodeOffsetsABijection) {
  std::vector<int> sizes;
  for (int64_t first = 0; first < 30; first += sizes.back())
    sizes.push_back(packed_group_blocks(30, first));
  EXPECT_EQ(sizes, (std::vector<int>{16, 8, 4, 2}));
  for (int g : {16, 8, 4, 2}) {
    std::vector<int> seen(32 * g, 0), nibble_seen(32 * g, 0);
    for (int b = 0; b < g; ++b) {
      for (int e = 0; e < 32; ++e) {
        const int o = packed_code_offset(g, b, e);
        ASSERT_GE(o, 0);
        ASSERT_LT(o, 32 * g);
        ++seen[o];
        // Each 32-bit lane of a step holds codes of one block only.
        EXPECT_EQ((o % 64) / 4 / (16 / g), b) << "g " << g << " element " << e;
        const NibbleSlot slot = packed_nibble_slot(g, o);
        ASSERT_LT(slot.byte, 16 * g);
        ++nibble_seen[2 * slot.byte + slot.high];
      }
    }
    for (int o = 0; o < 32 * g; ++o) {
      EXPECT_EQ(seen[o], 1) << "g " << g << " offset " << o;
      EXPECT_EQ(nibble_seen[o], 1) << "g " << g << " nibble " << o;
    }
  }
}

TEST(PackedActivation, SameCodesAsQ8_0InGroupOrder) {
  const int64_t k = 30 * 32;  // groups of 16, 8, 4 and 2 blocks
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
  const auto groups = groups_of(k / 32);
  const auto* sums =
      reinterpret_cast<const float*>(packed.data() + packed.size() - (k / 32) * sizeof(float));
  for (int64_t b = 0; b < k / 32; ++b) {
    const auto [first, g] = groups[b];
    size_t base = 0;
    for (int64_t f = 0; f < first; f += packed_group_blocks(k / 32, f))
      base += packed_activation_group_bytes(packed_group_blocks(k / 32, f));
    const int bi = int(b - first);
    int sum = 0;
    for (int e = 0; e < 32; ++e) {
      const auto code = int8_t(packed[base + packed_code_offset(g, bi, e)]);
      ASSERT_EQ(code, ref[b].qs[e]) << "block " << b << " element " << e;
      sum += code;
    }
    const float d = f16_to_f32(ref[b].d);
    const auto* lanes = reinterpret_cast<const float*>(packed.data() + base + 32 * g);
    for (int i = 0; i < 16 / g; ++i) EXPECT_EQ(lanes[bi * (16 / g) + i], d) << "block " << b;
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
    const int64_t n = 3, k = 1920;  // 60 blocks: groups of 16, 16, 16, 8, 4
    const PackedWeights w = make_packed(t, n, k, 7);
    const size_t stride = packed_weight_row_bytes(t, k);
    const bool q8 = t == DType::Q8_0;
    const size_t codes = q8 ? size_t(k) : size_t(k) / 2;
    const auto groups = groups_of(k / 32);
    std::vector<float> deq(k);
    for (int64_t r = 0; r < n; ++r) {
      dequantize_row(t, w.tensor.row(r), deq.data(), k);
      const uint8_t* row = w.packed.get() + r * stride;
      const auto* d = reinterpret_cast<const uint16_t*>(row + codes);
      const uint16_t* m = d + k / 32;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t b = i / 32;
        const int e = int(i % 32);
        const auto [first, g] = groups[b];
        const uint8_t* group = row + (q8 ? 32 : 16) * first;
        const int o = packed_code_offset(g, int(b - first), e);
        int u;
        if (q8) {
          u = group[o];
        } else {
          const NibbleSlot slot = packed_nibble_slot(g, o);
          u = slot.high ? group[slot.byte] >> 4 : group[slot.byte] & 0xF;
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
  for (int64_t k : {64, 128, 256, 576, 960, 1088}) {
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
