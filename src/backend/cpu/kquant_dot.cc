// The portable kernels of kquant_dot.h: the arithmetic written out, one output at a time.
#include "backend/cpu/kquant_dot.h"

#include <algorithm>
#include <cmath>

#include "base/fp16.h"
#include "tensor/quant_formats.h"
#include "tensor/quant_kscales.h"

namespace kestrel::cpu {
namespace {

int32_t dot_i8(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

// One super-block's codes and sub-block scales: 8 sub-blocks of 32 (Q4_K, Q5_K, with mins) or
// 16 of 16 (Q6_K, codes already offset by −32).
struct Decoded {
  int8_t q[QK_K];
  int32_t sc[16], mn[8];
};

template <DType T>
struct Format;
template <>
struct Format<DType::Q4_K> {
  using Block = BlockQ4_K;
  static constexpr int kSub = 8;
  static void decode(const Block& b, Decoded& d) { decode_k<false>(b, d); }
  template <bool kHighBit, typename B>
  static void decode_k(const B& b, Decoded& d) {
    uint8_t sc[8], mn[8];
    unpack_k_scales(b.scales, sc, mn);
    for (int j = 0; j < 8; ++j) {
      d.sc[j] = sc[j];
      d.mn[j] = mn[j];
    }
    // Chunk c of 64 elements: sub-block 2c in the low nibbles of qs[32c..], 2c+1 in the high.
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        int lo = b.qs[32 * c + l] & 0xF, hi = b.qs[32 * c + l] >> 4;
        if constexpr (kHighBit) {
          lo |= ((b.qh[l] >> (2 * c)) & 1) << 4;
          hi |= ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        d.q[64 * c + l] = int8_t(lo);
        d.q[64 * c + 32 + l] = int8_t(hi);
      }
  }
  static float d(const Block& b) { return f16_to_f32(b.d); }
  static float dmin(const Block& b) { return f16_to_f32(b.dmin); }
};
template <>
struct Format<DType::Q5_K> {
  using Block = BlockQ5_K;
  static constexpr int kSub = 8;
  static void decode(const Block& b, Decoded& d) { Format<DType::Q4_K>::decode_k<true>(b, d); }
  static float d(const Block& b) { return f16_to_f32(b.d); }
  static float dmin(const Block& b) { return f16_to_f32(b.dmin); }
};
template <>
struct Format<DType::Q6_K> {
  using Block = BlockQ6_K;
  static constexpr int kSub = 16;
  static void decode(const Block& b, Decoded& d) {
    for (int j = 0; j < 16; ++j) d.sc[j] = b.scales[j];
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = b.ql + 64 * n;
      const uint8_t* qh = b.qh + 32 * n;
      int8_t* e = d.q + 128 * n;
      for (int l = 0; l < 32; ++l) {
        e[l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        e[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        e[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        e[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
  static float d(const Block& b) { return f16_to_f32(b.d); }
  static float dmin(const Block&) { return 0.0f; }
};

template <DType T>
void rows_dot(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int nx, int64_t k,
              float* out, int64_t os) {
  using F = Format<T>;
  constexpr int kLen = QK_K / F::kSub;
  const int64_t nb = k / QK_K;
  nx = std::min(nx, kMaxTileRows);
  const BlockQ8_K* xr[kMaxTileRows];
  for (int r = 0; r < nx; ++r)
    xr[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
  Decoded dec;
  for (int64_t j = 0; j < nw; ++j) {
    const auto* wb =
        reinterpret_cast<const typename F::Block*>(static_cast<const uint8_t*>(w) + size_t(j) * ws);
    float acc[kMaxTileRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      F::decode(wb[b], dec);  // once for every activation row
      const float dw = F::d(wb[b]), dminw = F::dmin(wb[b]);
      for (int r = 0; r < nx; ++r) {
        const BlockQ8_K& y = xr[r][b];
        int32_t c = 0;
        for (int s = 0; s < F::kSub; ++s)
          c += dec.sc[s] * dot_i8(dec.q + kLen * s, y.qs + kLen * s, kLen);
        acc[r] = std::fma(float(c), dw * y.d, acc[r]);
        if constexpr (T != DType::Q6_K) {
          int32_t m = 0;
          for (int s = 0; s < 8; ++s) m += dec.mn[s] * (y.bsums[2 * s] + y.bsums[2 * s + 1]);
          acc[r] = std::fma(float(-m), dminw * y.d, acc[r]);
        }
      }
    }
    for (int r = 0; r < nx; ++r) out[r * os + j] = acc[r];
  }
}

const KQuantKernels kScalar{rows_dot<DType::Q4_K>, rows_dot<DType::Q5_K>, rows_dot<DType::Q6_K>,
                            kMaxTileRows};

template <DType T>
void decode_as(const void* block, KQuantBlockCodes& out) {
  using F = Format<T>;
  Decoded d;
  F::decode(*static_cast<const typename F::Block*>(block), d);
  const int offset = T == DType::Q6_K ? 32 : 0;
  for (int i = 0; i < QK_K; ++i) out.u[i] = uint8_t(d.q[i] + offset);
  for (int j = 0; j < 16; ++j) out.sc[j] = j < F::kSub ? d.sc[j] : 0;
  for (int j = 0; j < 8; ++j) out.mn[j] = T == DType::Q6_K ? 0 : d.mn[j];
}

}  // namespace

const KQuantKernels& scalar_kquant_kernels() {
  return kScalar;
}

void decode_kquant_block(DType t, const void* block, KQuantBlockCodes& out) {
  switch (t) {
    case DType::Q4_K:
      return decode_as<DType::Q4_K>(block, out);
    case DType::Q5_K:
      return decode_as<DType::Q5_K>(block, out);
    default:
      return decode_as<DType::Q6_K>(block, out);
  }
}

}  // namespace kestrel::cpu
