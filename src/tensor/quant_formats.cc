#include "tensor/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "base/status.h"
#include "tensor/fp8.h"
#include "tensor/quant_kscales.h"

namespace kestrel {
namespace {

// Converts to an int code after clamping in float, so NaN or infinite inputs still give
// defined (if meaningless) codes. Truncates toward zero like a plain int conversion.
int clamped_int(float v, float lo, float hi) {
  return int(std::fmin(hi, std::fmax(lo, v)));
}

// Round half to even, as ggml's nearest_int (K-quants and Q8_K use it), then clamp.
int nearest_code(float v, float lo, float hi) {
  return clamped_int(std::nearbyint(v), lo, hi);
}

// The value of largest magnitude, keeping its sign (first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

float absmax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// ---- dequantization: y = d*q (+m) in f32, d converted from f16, as ggml computes it ----

void dequant_mxfp4(const BlockMXFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = mxfp4_scale(b[i].e);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = float(kMxfp4Values[b[i].qs[j] & 0xF]) * d;
      y[j + QK / 2] = float(kMxfp4Values[b[i].qs[j] >> 4]) * d;
    }
  }
}

// The E2M1 code of v (in units of the scale): the nearest grid point of |v| clamped to 6, an exact
// midpoint to the even code, the sign bit copied.
int e2m1_code(float v) {
  static constexpr float kGrid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::fmin(std::fabs(v), 6.0f);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kGrid[c]), db = std::fabs(a - kGrid[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best | (std::signbit(v) && best != 0 ? 8 : 0);
}

void quant_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK) {
    // pow2ceil on the bit pattern: the exponent, plus one where the mantissa is non-zero.
    const float v = std::fmax(absmax(x, QK), 6.0f * 0x1p-126f) * (1.0f / 6.0f);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    const int k = int(bits >> 23) - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);  // scale = 2^k
    y[i].e = uint8_t(std::clamp(k + 127, 0, 254));
    const float inv = std::ldexp(1.0f, -k);
    for (int j = 0; j < QK / 2; ++j)
      y[i].qs[j] = uint8_t(e2m1_code(x[j] * inv) | e2m1_code(x[j + QK / 2] * inv) << 4);
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = float((b[i].qs[j] & 0xF) - 8) * d;
      y[j + QK / 2] = float((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = float(b[i].qs[j] & 0xF) * d + m;
      y[j + QK / 2] = float(b[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit codes of a Q5_0 / Q5_1 block, in element order.
void q5_codes(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < QK / 2; ++j) {
    q[j] = (qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
    q[j + QK / 2] = (qs[j] >> 4) | int(((qh >> (j + QK / 2)) & 1) << 4);
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  int q[QK];
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = f16_to_f32(b[i].d);
    q5_codes(b[i].qh, b[i].qs, q);
    for (int j = 0; j < QK; ++j) y[j] = float(q[j] - 16) * d;
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  int q[QK];
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    q5_codes(b[i].qh, b[i].qs, q);
    for (int j = 0; j < QK; ++j) y[j] = float(q[j]) * d + m;
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < QK; ++j) y[j] = float(b[i].qs[j]) * d;
  }
}

// Q4_K and Q5_K share the scale layout; qh == nullptr means Q4_K.
void dequant_kquant(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qh,
                    const uint8_t* qs, float* y) {
  const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
  uint8_t sc[8], mn[8];
  unpack_k_scales(scales, sc, mn);
  for (int c = 0; c < 4; ++c, y += 64) {
    const float d1 = d * float(sc[2 * c]), m1 = dmin * float(mn[2 * c]);
    const float d2 = d * float(sc[2 * c + 1]), m2 = dmin * float(mn[2 * c + 1]);
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
      if (qh) {
        lo += ((qh[l] >> (2 * c)) & 1) << 4;
        hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      y[l] = d1 * float(lo) - m1;
      y[l + 32] = d2 * float(hi) - m2;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int n = 0; n < 2; ++n, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * n;
      const uint8_t* qh = b[i].qh + 32 * n;
      const int8_t* sc = b[i].scales + 8 * n;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[s]) * float(q0);
        y[l + 32] = d * float(sc[s + 2]) * float(q1);
        y[l + 64] = d * float(sc[s + 4]) * float(q2);
        y[l + 96] = d * float(sc[s + 6]) * float(q3);
      }
    }
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    for (int j = 0; j < QK_K; ++j) y[j] = b[i].d * float(b[i].qs[j]);
  }
}

// ---- weight quantizers (reference quality) ----

// Q4_0 / Q5_0: d = signed absmax / -(2^(bits-1)), so the largest-magnitude value maps exactly
// to code 0; codes are truncated after adding offset + 0.5, as ggml's reference does.
void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK) {
    const float d = signed_absmax(x, QK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = clamped_int(x[j] * id + 8.5f, 0, 15);
      const int hi = clamped_int(x[j + QK / 2] * id + 8.5f, 0, 15);
      b[i].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK) {
    const float d = signed_absmax(x, QK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = clamped_int(x[j] * id + 16.5f, 0, 31);
      const int hi = clamped_int(x[j + QK / 2] * id + 16.5f, 0, 31);
      b[i].qs[j] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= uint32_t(lo >> 4) << j;
      qh |= uint32_t(hi >> 4) << (j + QK / 2);
    }
    std::memcpy(b[i].qh, &qh, 4);
  }
}

// Q4_1 / Q5_1 (kMax = 15 / 31): d = (max - min) / kMax, m = min.
template <typename Block, int kMax>
void quant_min_max(const float* x, Block* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK) {
    const float lo = *std::min_element(x, x + QK), hi = *std::max_element(x, x + QK);
    const float d = (hi - lo) / float(kMax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(lo);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = clamped_int((x[j] - lo) * id + 0.5f, 0, kMax);
      const int q1 = clamped_int((x[j + QK / 2] - lo) * id + 0.5f, 0, kMax);
      b[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t(q0 >> 4) << j;
      qh |= uint32_t(q1 >> 4) << (j + QK / 2);
    }
    if constexpr (kMax == 31) std::memcpy(b[i].qh, &qh, 4);
  }
}

// Q4_K / Q5_K with a plain min/max scheme (no error search as in ggml's quantizer): each
// 32-element sub-block gets offset o = dmin*mn >= -min(0, lo) and step s = d*sc such that
// [-o, -o + kMax*s] covers the sub-block; both 6-bit factors are rounded up, so nothing clips
// (beyond f16 rounding of d/dmin) and every element is within s/2 of its value. The step is a
// little coarser than the ideal (max - min)/kMax: up to one unit of d plus dmin/kMax.
struct KScales {
  uint16_t d, dmin;  // f16
};
KScales quant_kquant(const float* x, int max_code, uint8_t* scales, uint8_t* codes) {
  float hi[8], off[8];
  float max_off = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* s = x + 32 * j;
    off[j] = -std::min(0.0f, *std::min_element(s, s + 32));
    hi[j] = *std::max_element(s, s + 32);
    max_off = std::max(max_off, off[j]);
  }
  KScales out;
  out.dmin = f32_to_f16(max_off / 63.0f);
  const float dmin = f16_to_f32(out.dmin);
  uint8_t sc[8], mn[8];
  float need[8], max_need = 0.0f;
  for (int j = 0; j < 8; ++j) {
    mn[j] = dmin > 0.0f ? uint8_t(std::min(63.0f, std::ceil(off[j] / dmin))) : 0;
    need[j] = std::max(0.0f, hi[j] + dmin * float(mn[j])) / float(max_code);
    max_need = std::max(max_need, need[j]);
  }
  out.d = f32_to_f16(max_need / 63.0f);
  const float d = f16_to_f32(out.d);
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0.0f ? uint8_t(std::min(63.0f, std::ceil(need[j] / d))) : 0;
    const float step = d * float(sc[j]), o = dmin * float(mn[j]);
    for (int l = 0; l < 32; ++l) {
      const float v = step > 0.0f ? (x[32 * j + l] + o) / step : 0.0f;
      codes[32 * j + l] = uint8_t(nearest_code(v, 0, float(max_code)));
    }
  }
  for (int k = 0; k < 4; ++k) {
    scales[k] = uint8_t(sc[k] | ((sc[k + 4] >> 4) << 6));
    scales[k + 4] = uint8_t(mn[k] | ((mn[k + 4] >> 4) << 6));
    scales[k + 8] = uint8_t((sc[k + 4] & 0xF) | ((mn[k + 4] & 0xF) << 4));
  }
  return out;
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  uint8_t q[QK_K];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    const KScales ks = quant_kquant(x, 15, b[i].scales, q);
    b[i].d = ks.d;
    b[i].dmin = ks.dmin;
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = uint8_t(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  uint8_t q[QK_K];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    const KScales ks = quant_kquant(x, 31, b[i].scales, q);
    b[i].d = ks.d;
    b[i].dmin = ks.dmin;
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        b[i].qs[32 * c + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

// Q6_K: each 16-element sub-block maps its largest-magnitude value to code -32 (scale
// = value / -32, as Q4_0 does); the int8 sub-block scales are rounded away from zero so no
// code needs more than the 6 bits. Elements are within one step |d*sc| of their value (half a
// step except where +32 clips to +31).
void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float scale[16], max_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scale[j] = signed_absmax(x + 16 * j, 16) / -32.0f;
      max_scale = std::max(max_scale, std::fabs(scale[j]));
    }
    b[i].d = f32_to_f16(max_scale / 127.0f);
    const float d = f16_to_f32(b[i].d);
    uint8_t q[QK_K];
    for (int j = 0; j < 16; ++j) {
      const float mag = d > 0.0f ? std::min(127.0f, std::ceil(std::fabs(scale[j]) / d)) : 0.0f;
      b[i].scales[j] = int8_t(scale[j] < 0.0f ? -mag : mag);
      const float step = d * float(b[i].scales[j]);
      for (int l = 0; l < 16; ++l) {
        const float v = step != 0.0f ? x[16 * j + l] / step : 0.0f;
        q[16 * j + l] = uint8_t(nearest_code(v, -32, 31) + 32);
      }
    }
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int n = 0; n < 2; ++n) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* e = q + 128 * n + l;  // elements l, l+32, l+64, l+96 of this half
        b[i].ql[64 * n + l] = uint8_t((e[0] & 0xF) | ((e[64] & 0xF) << 4));
        b[i].ql[64 * n + l + 32] = uint8_t((e[32] & 0xF) | ((e[96] & 0xF) << 4));
        b[i].qh[32 * n + l] =
            uint8_t((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  KCHECK(n % info.block_elems == 0, "{} row of {} elements is not whole blocks", info.name, n);
  const int64_t nb = n / info.block_elems;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::F8_E4M3: {
      const auto* c = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(c[i]);
      return;
    }
    case DType::I8: {
      const auto* c = static_cast<const int8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(c[i]);
      return;
    }
    case DType::I32: {
      const auto* c = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(c[i]);
      return;
    }
    case DType::Q4_0:
      return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::Q4_1:
      return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::Q5_0:
      return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::Q5_1:
      return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::Q8_0:
      return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::Q4_K: {
      const auto* b = static_cast<const BlockQ4_K*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        dequant_kquant(b[i].d, b[i].dmin, b[i].scales, nullptr, b[i].qs, dst + i * QK_K);
      }
      return;
    }
    case DType::Q5_K: {
      const auto* b = static_cast<const BlockQ5_K*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        dequant_kquant(b[i].d, b[i].dmin, b[i].scales, b[i].qh, b[i].qs, dst + i * QK_K);
      }
      return;
    }
    case DType::Q6_K:
      return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::Q8_K:
      return dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
    case DType::MXFP4:
      return dequant_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb);
    default:
      KCHECK(false, "dequantize_row: unsupported dtype {}", info.name);
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  KCHECK(n % QK == 0, "q8_0 row of {} elements is not whole blocks", n);
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = absmax(x, QK) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK; ++j) y[i].qs[j] = int8_t(clamped_int(std::round(x[j] * id), -127, 127));
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  KCHECK(n % QK == 0, "q8_1 row of {} elements is not whole blocks", n);
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = absmax(x, QK) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
      y[i].qs[j] = int8_t(clamped_int(std::round(x[j] * id), -127, 127));
      sum += y[i].qs[j];
    }
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(float(sum) * d);
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  KCHECK(n % QK_K == 0, "q8_k row of {} elements is not whole blocks", n);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float max = signed_absmax(x, QK_K);
    if (max == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The largest-magnitude value maps to -127 exactly (ggml's sign convention).
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = int8_t(nearest_code(iscale * x[j], -127, 127));
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = int16_t(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_row(DType t, const float* x, void* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  KCHECK(n % info.block_elems == 0, "{} row of {} elements is not whole blocks", info.name, n);
  const int64_t nb = n / info.block_elems;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, x, size_t(n) * sizeof(float));
      return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case DType::Q4_0:
      return quant_q4_0(x, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1:
      return quant_min_max<BlockQ4_1, 15>(x, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0:
      return quant_q5_0(x, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1:
      return quant_min_max<BlockQ5_1, 31>(x, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q8_0:
      return quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n);
    case DType::Q4_K:
      return quant_q4_k(x, static_cast<BlockQ4_K*>(dst), nb);
    case DType::Q5_K:
      return quant_q5_k(x, static_cast<BlockQ5_K*>(dst), nb);
    case DType::Q6_K:
      return quant_q6_k(x, static_cast<BlockQ6_K*>(dst), nb);
    case DType::MXFP4:
      return quant_mxfp4(x, static_cast<BlockMXFP4*>(dst), nb);
    default:
      KCHECK(false, "quantize_row: unsupported target dtype {}", info.name);
  }
}

void mxfp4_from_column_pairs(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                             int64_t cols, BlockMXFP4* out) {
  KCHECK(cols % QK == 0, "MXFP4 rows of {} columns are not whole blocks", cols);
  const int64_t nb = cols / QK;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = codes + r * (cols / 2);
    for (int64_t b = 0; b < nb; ++b, ++out) {
      const auto code = [&](int j) {  // column 32b + j
        const uint8_t byte = row[(QK * b + j) / 2];
        return j % 2 == 0 ? byte & 0xF : byte >> 4;
      };
      out->e = scales[r * nb + b];
      for (int j = 0; j < QK / 2; ++j) out->qs[j] = uint8_t(code(j) | code(j + QK / 2) << 4);
    }
  }
}

}  // namespace kestrel
