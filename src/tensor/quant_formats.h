// tensor/quant_formats.h — GGUF block layouts, dequantization (exact to the format definition)
// and the int8 activation formats the integer dot products use (Q8_0, Q8_1, Q8_K as in ggml).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kestrel {

constexpr int QK = 32;     // elements per block of Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q8_1
constexpr int QK_K = 256;  // elements per K-quant super-block

#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[QK / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[QK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[QK];
};
// Q8_1: d and s = d * sum(qs), both f16 (used with Q4_1 / Q5_1 weights).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[QK];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
// Q8_K: f32 scale, int8 codes, and the sum of each group of 16 codes.
// MXFP4: code c's value is kMxfp4Values[c] · 2^(e − 128) (the E2M1 grid doubled, so the codes
// are integers, and the E8M0 scale halved).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[QK / 2];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e − 128) as f32, from its bits (exact, subnormal for e < 2), as every kernel computes it.
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292 && sizeof(BlockMXFP4) == 17);

// Converts n elements (a multiple of the block size) of any supported dtype to f32:
// F32, F16, BF16, F8_E4M3 (the codes' values, without block scales), Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K, Q8_K, MXFP4.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// DeepSeek-V4's routed experts as released (deepseek-v4-family.md): E2M1 codes two per byte in
// column order (even column in the low nibble), [rows, cols / 2], and an E8M0 scale per 32
// columns, [rows, cols / 32]. Rewrites them as MXFP4 blocks (ggml's layout), rows · cols / 32 of
// them: the same values.
void mxfp4_from_column_pairs(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                             int64_t cols, BlockMXFP4* out);

// Activation quantizers (round-to-nearest, as ggml's reference quantizers).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);

// Weight quantizers, used by tests and the converter (reference quality, not speed):
// supported targets Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, F16, BF16, F32.
// MXFP4 as DeepSeek-V4's reference quantizes (deepseek-v4-family.md): scale 2^ceil(log2(max(amax,
// 6·2^-126) / 6)), values clamped to ±6 scales, each rounded to the nearest E2M1 grid point with
// ties to the even code.
void quantize_row(DType t, const float* x, void* dst, int64_t n);

}  // namespace kestrel
