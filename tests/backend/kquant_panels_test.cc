// K-quant panels (kquant_panels.h): packing keeps every code, scale and min of a Q4_K, Q5_K or
// Q6_K weight in its slot and pads the last panel; the panel GEMM gives the scalar row kernels'
// bits (kquant_dot.h) on every ISA and batch size, with random weights and with the largest codes
// and scales against the largest activations, where an int16 partial sum could saturate.
#include "backend/cpu/kquant_panels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kquant_dot.h"
#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "base/fp16.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

struct KWeight {
  std::vector<uint8_t> bytes;
  std::unique_ptr<CpuLinearPlan> plan;
  LinearWeight packed, rows;  // with the panel plan; without a plan (the row kernels)
};

void attach(KWeight& w, DType t, int64_t n, int64_t k) {
  w.rows = LinearWeight{Tensor{w.bytes.data(), t, Shape{n, k}}};
  w.packed = w.rows;
  w.plan = make_linear_plan(w.rows.w, Packing::kKQuantPanels);
  w.packed.plan = w.plan.get();
}

KWeight random_weight(DType t, int64_t n, int64_t k, uint32_t seed) {
  KWeight w;
  w.bytes.resize(dtype_bytes(t, n * k));
  const auto src = randn(n * k, seed);
  for (int64_t r = 0; r < n; ++r)
    quantize_row(t, src.data() + r * k, w.bytes.data() + r * dtype_bytes(t, k), k);
  attach(w, t, n, k);
  return w;
}

class KQuantPanels : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (avx2_kquant_gemm() == nullptr || !packed_weights_supported())
      GTEST_SKIP() << "no AVX2 on this CPU";
  }
  void TearDown() override { set_linear_isa("auto"); }
};

TEST_P(KQuantPanels, PackKeepsEveryCodeAndScaleAndPadsTheLastPanel) {
  const DType t = GetParam();
  const int64_t n = 19, k = 512;
  const KWeight w = random_weight(t, n, k, 3);
  const auto packed = pack_kquant_panels(w.rows.w);
  const size_t block_bytes = kquant_block_bytes(t), unit_bytes = kquant_unit_bytes(t);
  const int64_t nb = k / QK_K;
  KQuantBlockCodes dec;
  for (int64_t r = 0; r < packed_panels(n) * kPanelRows; ++r) {
    const int pr = int(r % kPanelRows);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block =
          packed.get() + size_t(r / kPanelRows) * nb * block_bytes + b * block_bytes;
      if (r < n) {
        decode_kquant_block(t, w.rows.w.row(r) + b * dtype_bytes(t, QK_K), dec);
      } else {
        dec = {};
      }
      for (int e = 0; e < QK_K; ++e) {
        const int u = e / 32, quad = e % 32 / 4;
        const uint8_t* unit = block + u * unit_bytes;
        const int byte = 4 * pr + e % 4;
        int code = (unit[64 * (quad % 4) + byte] >> (quad >= 4 ? 4 : 0)) & 0xF;
        const uint8_t* plane = unit + kPanelBlockCodes / 2;
        if (t == DType::Q5_K) code |= ((plane[byte] >> quad) & 1) << 4;
        if (t == DType::Q6_K)
          code |= ((plane[64 * (quad / 4) + byte] >> (2 * (quad % 4))) & 3) << 4;
        ASSERT_EQ(code, dec.u[e]) << dtype_name(t) << " row " << r << " element " << e;
      }
      const auto* scales = reinterpret_cast<const int8_t*>(block + kquant_scales_offset(t));
      for (int j = 0; j < kquant_sub_blocks(t); ++j)
        ASSERT_EQ(scales[j * kPanelRows + pr], dec.sc[j]) << "row " << r << " scale " << j;
      if (kquant_has_min(t)) {
        for (int j = 0; j < 8; ++j)
          ASSERT_EQ(block[kquant_mins_offset(t) + j * kPanelRows + pr], dec.mn[j]) << "row " << r;
      }
      const auto* d = reinterpret_cast<const uint16_t*>(block + kquant_d_offset(t));
      const uint8_t* src = r < n ? w.rows.w.row(r) + b * dtype_bytes(t, QK_K) : nullptr;
      uint16_t want_d = 0, want_dmin = 0;
      if (src != nullptr && t == DType::Q6_K) {
        std::memcpy(&want_d, src + offsetof(BlockQ6_K, d), 2);
      } else if (src != nullptr) {
        std::memcpy(&want_d, src, 2);
        std::memcpy(&want_dmin, src + 2, 2);
      }
      EXPECT_EQ(d[pr], want_d) << "row " << r;
      if (kquant_has_min(t)) {
        EXPECT_EQ(d[kPanelRows + pr], want_dmin) << "row " << r;
      }
    }
  }
}

// The panels and the scalar row kernels over the stored rows: the same bits, on every ISA, for
// every batch size (partial panels and halves, every row-tile remainder).
void expect_rows_bits(const KWeight& w, int64_t m, uint32_t seed, const std::vector<float>* xs) {
  const int64_t n = w.rows.rows(), k = w.rows.cols();
  const std::vector<float> x = xs != nullptr ? *xs : randn(m * k, seed);
  ThreadPool pool(2);
  set_linear_isa("scalar");
  std::vector<float> ref(size_t(m * n));
  linear(w.rows, x.data(), m, ref.data(), pool);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    std::vector<float> y(size_t(m * n), -1.0f);
    linear(w.packed, x.data(), m, y.data(), pool);
    EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
        << dtype_name(w.rows.w.dtype) << " " << isa << " M=" << m << " N=" << n;
  }
  set_linear_isa("auto");
}

TEST_P(KQuantPanels, EveryIsaGivesTheRowKernelsBits) {
  uint32_t seed = 11;
  for (int64_t n : {5, 16, 37}) {
    const KWeight w = random_weight(GetParam(), n, 768, seed++);
    ASSERT_NE(w.plan, nullptr);
    for (int64_t m : {1, 2, 3, 4, 5, 7, 9, 17}) expect_rows_bits(w, m, seed++, nullptr);
  }
}

// Every code and scale at its largest (Q6_K: scales ±127), activations at ±127.
TEST_P(KQuantPanels, ExtremeCodesDoNotSaturate) {
  const DType t = GetParam();
  const int64_t n = 24, k = 512, m = 12;  // past the AVX2 kernel's converted-codes threshold
  KWeight w;
  w.bytes.assign(dtype_bytes(t, n * k), 0xFF);
  const size_t block = dtype_bytes(t, QK_K);
  for (size_t off = 0; off < w.bytes.size(); off += block) {
    uint8_t* b = w.bytes.data() + off;
    const uint16_t d = f32_to_f16(0.01f), dmin = f32_to_f16(0.02f);
    if (t == DType::Q6_K) {
      auto* sc = reinterpret_cast<int8_t*>(b + offsetof(BlockQ6_K, scales));
      for (int j = 0; j < 16; ++j) sc[j] = int8_t(j % 2 == 0 ? 127 : -128);
      std::memcpy(b + offsetof(BlockQ6_K, d), &d, 2);
    } else {
      std::memcpy(b, &d, 2);
      std::memcpy(b + 2, &dmin, 2);
    }
  }
  attach(w, t, n, k);
  ASSERT_NE(w.plan, nullptr);
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = i / k % 2 == 0 ? 5.0f : -5.0f;
  expect_rows_bits(w, m, 0, &x);
  expect_rows_bits(w, 4, 0, &x);
  expect_rows_bits(w, 1, 0, &x);
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantPanels,
                         testing::Values(DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kestrel::cpu
