// Packed weights (packed_matmul.h): the activation quantizer gives quantize_row_q8_0's codes and
// per-row-tile scales with exact sums; packing keeps every weight value in its panel slot; and
// linear() over packed Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights equals the dequantized weights times the
// quantized activations (f32 rounding aside), does not depend on the batch or the thread count,
// gives the same bits on AMX and VNNI, and the same numbers whichever ISA is forced (the packed
// copy is then ignored).
#include "backend/cpu/packed_matmul.h"
#include "backend/cpu/linear_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "base/fp16.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

TEST(PackedLayout, CodeSlotsAreABijectionInQuadRows) {
  for (const bool nibbles : {false, true}) {
    const int bytes = nibbles ? kPanelBlockCodes / 2 : kPanelBlockCodes;
    std::vector<int> seen(2 * bytes, 0);
    for (int n = 0; n < kPanelRows; ++n) {
      for (int e = 0; e < 32; ++e) {
        const CodeSlot slot = packed_code_slot(nibbles, n, e);
        ASSERT_GE(slot.byte, 0);
        ASSERT_LT(slot.byte, bytes);
        ASSERT_TRUE(nibbles || !slot.high);
        ++seen[2 * slot.byte + slot.high];
        // Lane n of every 64-byte vector belongs to row n: what a broadcast activation needs.
        EXPECT_EQ(slot.byte % 64 / 4, n);
        // The four bytes of a lane are consecutive elements.
        EXPECT_EQ(slot.byte % 4, e % 4);
      }
    }
    for (int o = 0; o < 2 * bytes; ++o) EXPECT_EQ(seen[o], nibbles || o % 2 == 0 ? 1 : 0) << o;
  }
}

// Q5's fifth bits: one bit of the 64-byte plane per element, in the byte of the element's code
// slot, at the bit of its quad row (what the kernels' shifts assume).
TEST(PackedLayout, FifthBitSlotsAreABijectionAlignedWithTheCodes) {
  std::vector<int> seen(kPanelBlockCodes / 8 * 8, 0);
  for (int n = 0; n < kPanelRows; ++n) {
    for (int e = 0; e < 32; ++e) {
      const HighBitSlot hb = packed_high_bit_slot(n, e);
      ASSERT_GE(hb.byte, 0);
      ASSERT_LT(hb.byte, kPanelBlockCodes / 8);
      ++seen[8 * hb.byte + hb.bit];
      EXPECT_EQ(hb.byte, packed_code_slot(true, n, e).byte % 64);
      EXPECT_EQ(hb.bit, e / 4);
    }
  }
  for (int o = 0; o < int(seen.size()); ++o) EXPECT_EQ(seen[o], 1) << o;
}

TEST(PackedActivation, SameCodesAsQ8_0AndScalesPerRowTile) {
  const int64_t k = 30 * 32, m = 19;
  auto x = randn(m * k, 1, 3.0f);
  // Exact halves exercise round-half-away-from-zero; a zero block gives d = 0.
  x[5] = 0.5f * (x[0] > 0 ? 1.0f : -1.0f);
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;
  x[100] = 127.0f;
  x[101] = 63.5f;
  x[102] = -0.5f;
  const size_t stride = 1024;
  std::vector<int8_t> codes(packed_activation_rows(m) * stride);
  std::vector<float> scales(packed_activation_scale_bytes(m, k) / sizeof(float));
  ASSERT_EQ(scales.size(), size_t(2 * (k / 32) * 3 * kPanelRows));  // two row tiles
  for (int64_t r = 0; r < m; ++r)
    quantize_row_packed(x.data() + r * k, codes.data() + r * stride, scales.data(), r, k);
  const PackedActivations a{codes.data(), stride, scales.data(), k / 32};
  for (int64_t r = 0; r < m; ++r) {
    std::vector<BlockQ8_0> ref(k / 32);
    quantize_row_q8_0(x.data() + r * k, ref.data(), k);
    for (int64_t b = 0; b < k / 32; ++b) {
      int sum = 0;
      for (int e = 0; e < 32; ++e) {
        ASSERT_EQ(codes[r * stride + 32 * b + e], ref[b].qs[e]) << "row " << r << " block " << b;
        sum += ref[b].qs[e];
      }
      const float* ts = a.tile_scales(r / kPanelRows, b);
      const int lane = int(r % kPanelRows);
      const float d = f16_to_f32(ref[b].d);
      EXPECT_EQ(ts[lane], d);
      EXPECT_EQ(ts[kPanelRows + lane], d * float(sum));
      int32_t qsum;
      std::memcpy(&qsum, ts + 2 * kPanelRows + lane, sizeof(qsum));
      EXPECT_EQ(qsum, sum);
    }
  }
}

struct PackedWeights {
  std::vector<uint8_t> bytes;
  std::unique_ptr<uint8_t[]> packed;    // pack_weight's copy, for the layout checks
  std::unique_ptr<CpuLinearPlan> plan;  // the q8-panel plan linear() runs (AVX2 and AVX-512)
  LinearWeight tensor;
};

PackedWeights make_packed(DType t, int64_t n, int64_t k, uint32_t seed) {
  PackedWeights w;
  w.bytes.resize(dtype_bytes(t, n * k));
  const auto src = randn(n * k, seed);
  for (int64_t r = 0; r < n; ++r)
    quantize_row(t, src.data() + r * k, w.bytes.data() + r * dtype_bytes(t, k), k);
  w.tensor = LinearWeight{Tensor{w.bytes.data(), t, Shape{n, k}}};
  w.packed = pack_weight(w.tensor.w);
  w.plan = make_linear_plan(w.tensor.w, Packing::kQ8Panels);
  w.tensor.plan = w.plan.get();
  return w;
}

TEST(PackWeight, KeepsEveryValueAndPadsTheLastPanel) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    const int64_t n = 19, k = 1920;  // a whole panel and three rows of a second
    const PackedWeights w = make_packed(t, n, k, 7);
    const bool nibbles = t != DType::Q8_0;
    const bool fifth_bit = t == DType::Q5_0 || t == DType::Q5_1;
    const size_t block_bytes = packed_block_bytes(t), codes = packed_block_code_bytes(t);
    std::vector<float> deq(k);
    for (int64_t r = 0; r < packed_panels(n) * kPanelRows; ++r) {
      if (r < n) dequantize_row(t, w.tensor.w.row(r), deq.data(), k);
      const uint8_t* panel = w.packed.get() + (r / kPanelRows) * packed_panel_bytes(t, k);
      const int pr = int(r % kPanelRows);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t b = i / 32;
        const uint8_t* block = panel + b * block_bytes;
        const CodeSlot slot = packed_code_slot(nibbles, pr, int(i % 32));
        int u = !nibbles    ? block[slot.byte]
                : slot.high ? block[slot.byte] >> 4
                            : block[slot.byte] & 0xF;
        if (fifth_bit) {
          const HighBitSlot hb = packed_high_bit_slot(pr, int(i % 32));
          u |= ((block[kPanelBlockCodes / 2 + hb.byte] >> hb.bit) & 1) << 4;
        }
        const auto* d = reinterpret_cast<const uint16_t*>(block + codes);
        const float db = f16_to_f32(d[pr]);
        const float mb = packed_has_min(t)  ? f16_to_f32(d[kPanelRows + pr])
                         : t == DType::Q4_0 ? -8 * db
                         : t == DType::Q5_0 ? -16 * db
                                            : -128 * db;
        if (r >= n) {
          ASSERT_EQ(u, 0) << "padding row " << r;
          ASSERT_EQ(d[pr], 0) << "padding row " << r;
          continue;
        }
        ASSERT_FLOAT_EQ(db * float(u) + mb, deq[i])
            << dtype_name(t) << " row " << r << " element " << i;
      }
    }
  }
}

TEST(PackWeight, OnlyWholeBlocksOfSupportedTypes) {
  std::vector<uint8_t> bytes(4096);
  EXPECT_TRUE(packable(Tensor{bytes.data(), DType::Q4_1, Shape{2, 64}}));
  EXPECT_TRUE(packable(Tensor{bytes.data(), DType::Q8_0, Shape{3, 96}}));
  EXPECT_TRUE(packable(Tensor{bytes.data(), DType::Q5_0, Shape{3, 96}}));
  EXPECT_TRUE(packable(Tensor{bytes.data(), DType::Q5_1, Shape{3, 96}}));
  EXPECT_FALSE(packable(Tensor{bytes.data(), DType::Q4_K, Shape{2, 256}}));
  EXPECT_FALSE(packable(Tensor{bytes.data(), DType::F16, Shape{2, 64}}));
  EXPECT_FALSE(packable(Tensor{bytes.data(), DType::Q4_0, Shape{4}}));
}

class PackedLinear : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!packed_weights_supported()) GTEST_SKIP() << "no AVX2 on this CPU";
  }
  void TearDown() override {
    set_linear_isa("auto");
    set_packed_amx(true);
  }
};

TEST_P(PackedLinear, EqualsDequantizedWeightsTimesQuantizedActivations) {
  const DType t = GetParam();
  ThreadPool pool(2);
  uint32_t seed = 40;
  for (int64_t k : {32, 64, 96, 576, 960, 1088}) {
    for (int64_t n : {1, 7, 16, 33}) {
      const PackedWeights w = make_packed(t, n, k, seed++);
      std::vector<float> deq(n * k);
      for (int64_t r = 0; r < n; ++r) dequantize_row(t, w.tensor.w.row(r), deq.data() + r * k, k);
      for (int64_t m : {1, 3, 8, 9, 20, 33}) {
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

// AMX (batches from a few rows) and VNNI (decode, and where AMX is absent) must agree bit for
// bit, or a request's output would depend on how many others share its step.
TEST_P(PackedLinear, AmxAndVnniGiveTheSameBits) {
  if (!packed_amx_active()) GTEST_SKIP() << "no AMX on this CPU or kernel";
  ThreadPool pool(2);
  uint32_t seed = 90;
  for (int64_t k : {32, 96, 1536}) {
    for (int64_t n : {5, 48, 70}) {
      const PackedWeights w = make_packed(GetParam(), n, k, seed++);
      for (int64_t m : {8, 16, 17, 40}) {
        const auto x = randn(m * k, seed++);
        std::vector<float> amx(m * n), vnni(m * n);
        set_packed_amx(true);
        linear(w.tensor, x.data(), m, amx.data(), pool);
        set_packed_amx(false);
        linear(w.tensor, x.data(), m, vnni.data(), pool);
        ASSERT_EQ(std::memcmp(amx.data(), vnni.data(), amx.size() * sizeof(float)), 0)
            << "K=" << k << " N=" << n << " M=" << m;
        std::vector<float> one(n);
        set_packed_amx(true);
        for (int64_t i = 0; i < m; ++i) {
          linear(w.tensor, x.data() + i * k, 1, one.data(), pool);
          ASSERT_EQ(std::memcmp(one.data(), amx.data() + i * n, n * sizeof(float)), 0)
              << "row " << i << " alone vs in a batch of " << m;
        }
      }
    }
  }
}

// The packed GEMMs and every ISA's row kernels follow one arithmetic (q8_block_dot.h): the same
// bits with and without the packed copy, on every ISA, for batches of every size (partial
// panels, partial row tiles, AMX-sized batches).
TEST_P(PackedLinear, EveryIsaAndThePackedCopyGiveTheSameBits) {
  const int64_t n = 37, k = 320;
  PackedWeights w = make_packed(GetParam(), n, k, 5);
  ASSERT_NE(w.plan, nullptr) << "AVX2 and AVX-512 both have the panel GEMM";
  LinearWeight plain = w.tensor;
  plain.plan = nullptr;
  ThreadPool pool(2);
  for (int64_t m : {1, 3, 8, 17, 40}) {
    const auto x = randn(m * k, uint32_t(6 + m));
    std::vector<float> first;
    for (const auto& isa : available_isas()) {
      set_linear_isa(isa.c_str());
      for (const LinearWeight* lw : {&w.tensor, &plain}) {
        std::vector<float> y(size_t(m * n), -1.0f);
        linear(*lw, x.data(), m, y.data(), pool);
        if (first.empty()) first = y;
        EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0)
            << isa << (lw == &plain ? " rows" : " packed") << " M=" << m;
      }
    }
    set_linear_isa("auto");
  }
}

// The largest codes against the largest activations: where an int16 partial sum could saturate
// (Q5's 31 · 127 pairs, Q8_0's ±128 · 127), every ISA and the packed copy still give the row
// kernels' exact sums.
TEST_P(PackedLinear, ExtremeCodesDoNotSaturate) {
  const DType t = GetParam();
  const int64_t n = 24, k = 256;
  std::vector<uint8_t> bytes(dtype_bytes(t, n * k));
  const size_t block = dtype_bytes(t, 32);
  for (size_t off = 0; off < bytes.size(); off += block) {
    uint8_t* b = bytes.data() + off;
    std::memset(b, 0xFF, block);  // every code the largest (Q8_0: -1, set below)
    const uint16_t d = f32_to_f16(0.25f);
    std::memcpy(b, &d, sizeof(d));
    if (packed_has_min(t)) {
      const uint16_t m = f32_to_f16(-1.0f);
      std::memcpy(b + 2, &m, sizeof(m));
    }
    if (t == DType::Q8_0) {
      auto* q = reinterpret_cast<int8_t*>(b + 2);
      for (int e = 0; e < 32; ++e) q[e] = int8_t((off / block + e) % 3 == 0 ? -128 : 127);
    }
  }
  PackedWeights w;
  w.tensor = LinearWeight{Tensor{bytes.data(), t, Shape{n, k}}};
  w.plan = make_linear_plan(w.tensor.w, Packing::kQ8Panels);
  ASSERT_NE(w.plan, nullptr);
  w.tensor.plan = w.plan.get();
  LinearWeight plain = w.tensor;
  plain.plan = nullptr;
  ThreadPool pool(2);
  const int64_t m = 20;
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = i / k % 2 == 0 ? 3.0f : -3.0f;  // codes ±127
  set_linear_isa("scalar");
  std::vector<float> ref(m * n);
  linear(plain, x.data(), m, ref.data(), pool);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    for (int64_t rows : {int64_t(1), m}) {
      std::vector<float> y(rows * n);
      linear(w.tensor, x.data(), rows, y.data(), pool);
      EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
          << isa << " M=" << rows;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedLinear,
                         testing::Values(DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                         DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kestrel::cpu
