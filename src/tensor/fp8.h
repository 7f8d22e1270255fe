// tensor/fp8.h — float8_e4m3fn codes (DeepSeek-V3's FP8 weights): the exact value of a code,
// and the f16 bit pattern the SIMD kernels convert through.
//
// A code is s eeee mmm with exponent bias 7 and no infinities: e = 0 gives (-1)^s · 2^-6 · m/8,
// otherwise (-1)^s · 2^(e-7) · (1 + m/8); 0x7F and 0xFF are NaN; the largest finite value is 448.
#pragma once

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

}  // namespace kestrel
