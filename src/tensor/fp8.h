// tensor/fp8.h — float8 codes: e4m3fn (DeepSeek-V3's FP8 weights, FP8 and MXFP8 KV caches) and
// e5m2 (the other FP8 KV cache): the exact value of a code, the nearest code of an f32 (as
// CUDA's saturating conversion: round to nearest even, out-of-range values to the largest
// finite code), and the f16 bit patterns the SIMD kernels convert through; and OCP E8M0 scales.
//
// An e4m3 code is s eeee mmm with exponent bias 7 and no infinities: e = 0 gives
// (-1)^s · 2^-6 · m/8, otherwise (-1)^s · 2^(e-7) · (1 + m/8); 0x7F and 0xFF are NaN; the
// largest finite value is 448. An e5m2 code is the top byte of an f16 (bias 15, infinities and
// NaNs as IEEE); the largest finite value is 57344.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/fp16.h"

namespace kestrel {

inline float fp8_e4m3_to_f32(uint8_t code) {
  if ((code & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  const uint32_t e = (code >> 3) & 0xF, m = code & 0x7;
  // Normal codes move into f32's fields (bias 127 = 7 + 120); subnormals are m · 2^-9.
  const float mag = e == 0 ? float(m) * 0x1p-9f : bits_to_f32(((e + 120) << 23) | (m << 20));
  return (code & 0x80) != 0 ? -mag : mag;
}

// The f16 bits of code's value times 2^-8 (kFp8F16Scale undoes it), exact for every finite
// code: the exponent and mantissa fields land in f16's, whose larger bias (15 = 7 + 8) supplies
// the 2^-8, and an exponent field of 0 means 2^(1-bias) · 0.m in both formats, so subnormals
// line up too. NaN codes become ±480 · 2^-8; quantized checkpoints never hold them.
constexpr uint16_t fp8_e4m3_to_f16_scaled(uint8_t code) {
  return uint16_t(((code & 0x7F) << 7) | ((code & 0x80) << 8));
}
constexpr float kFp8F16Scale = 256.0f;

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

namespace fp8_detail {

// The saturating round-to-nearest-even code of x with `mbits` mantissa bits, exponent bias
// `bias` and largest finite magnitude code `max_code`: the normal range rounds f32's mantissa
// (a carry moves into the exponent, as it should), the subnormal one is m · 2^(1-bias-mbits).
inline uint8_t encode(float x, int mbits, int bias, uint8_t max_code) {
  if (std::isnan(x)) return 0x7F;
  const uint32_t u = f32_to_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t a = u & 0x7FFFFFFF;
  const int exp = int(a >> 23) - 127;
  uint32_t code;
  if (exp < 1 - bias) {
    // nearbyint rounds half to even in the default mode; a result of 2^mbits is the smallest
    // normal code, which the encoding places right after the subnormals.
    code = uint32_t(std::nearbyint(std::ldexp(bits_to_f32(a), bias - 1 + mbits)));
  } else {
    const int shift = 23 - mbits;
    const uint32_t r = (a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1)) >> shift;
    const int64_t c = int64_t(r) - (int64_t(127 - bias) << mbits);
    code = c > max_code ? max_code : uint32_t(c);
  }
  return uint8_t(sign | (code > max_code ? max_code : code));
}

}  // namespace fp8_detail

inline uint8_t f32_to_fp8_e4m3(float x) {
  return fp8_detail::encode(x, 3, 7, 0x7E);
}
inline uint8_t f32_to_fp8_e5m2(float x) {
  return fp8_detail::encode(x, 2, 15, 0x7B);
}
inline float fp8_e5m2_to_f32(uint8_t code) {
  return f16_to_f32(uint16_t(code) << 8);
}

// An E8M0 scale byte: 2^(e - 127); 0xFF is NaN.
inline float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return e == 0 ? 0x1p-127f : bits_to_f32(uint32_t(e) << 23);
}

// The OCP MX shared scale of a block whose largest magnitude is `amax`, for E4M3 elements:
// floor(log2 amax) - 8 (8: the exponent of 448), clamped to [-127, 127], as its E8M0 byte; an
// all-zero block takes the guard of f32's smallest normal (so the clamp's -127).
inline uint8_t mx_e4m3_scale(float amax) {
  const float m = amax > 0x1p-126f ? amax : 0x1p-126f;
  const int e = std::ilogb(m) - 8;
  return uint8_t(std::clamp(e, -127, 127) + 127);
}

}  // namespace kestrel
