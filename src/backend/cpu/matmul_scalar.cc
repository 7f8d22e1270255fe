// Portable dot-product kernels: the reference the SIMD kernels are tested against, and the
// fallback on CPUs without AVX2. Quantized blocks use exact integer dot products against the
// int8 activations, then scale in f32, as ggml's generic code does.
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "base/fp16.h"
#include "tensor/quant_formats.h"
#include "tensor/quant_kscales.h"

namespace kestrel::cpu {
namespace {

template <typename T>
const T* row(const void* x, size_t stride, int r) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + size_t(r) * stride);
}

template <int NX>
void store(const float* acc, float* out, int64_t out_stride) {
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) out[r * out_stride] = acc[r];
}

int dot_i8(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += int(a[i]) * int(b[i]);
  return s;
}

// ---- float weights ----

struct F32W {
  static float at(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};
struct F16W {
  static float at(const void* w, int64_t i) {
    return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
};
struct BF16W {
  static float at(const void* w, int64_t i) {
    return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
};

template <typename W>
struct FloatDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    float acc[NX] = {};
    for (int64_t i = 0; i < k; ++i) {
      const float wi = W::at(w, i);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) acc[r] = std::fma(wi, row<float>(x, xs, r)[i], acc[r]);
    }
    store<NX>(acc, out, os);
  }
};

// ---- 32-element blocks against Q8_0 (symmetric weights; Q4_0 and Q8_0: q8_block_dot.h) ----

int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int nib = j < QK / 2 ? (qs[j] & 0xF) : (qs[j - QK / 2] >> 4);
  return nib | int(((qh >> j) & 1) << 4);
}

// Decoders give the block's f32 scale and its signed codes.
struct Q5_0W {
  using Block = BlockQ5_0;
  static float decode(const Block& b, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < QK; ++j) q[j] = int8_t(q5_code(b.qs, qh, j) - 16);
    return f16_to_f32(b.d);
  }
};

template <typename W>
struct SymDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const typename W::Block*>(w);
    float acc[NX] = {};
    int8_t q[QK];
    for (int64_t b = 0; b < k / QK; ++b) {
      const float dw = W::decode(wb[b], q);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_0& y = row<BlockQ8_0>(x, xs, r)[b];
        acc[r] += float(dot_i8(q, y.qs, QK)) * (dw * f16_to_f32(y.d));
      }
    }
    store<NX>(acc, out, os);
  }
};

// ---- 32-element blocks with a min against Q8_1: d_w*d_x*sum(q*y) + m_w*s_x ----

struct Q5_1W {
  using Block = BlockQ5_1;
  static void decode(const Block& b, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < QK; ++j) q[j] = int8_t(q5_code(b.qs, qh, j));
  }
};

template <typename W>
struct MinDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const typename W::Block*>(w);
    float acc[NX] = {};
    int8_t q[QK];
    for (int64_t b = 0; b < k / QK; ++b) {
      W::decode(wb[b], q);
      const float dw = f16_to_f32(wb[b].d), mw = f16_to_f32(wb[b].m);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_1& y = row<BlockQ8_1>(x, xs, r)[b];
        acc[r] += float(dot_i8(q, y.qs, QK)) * (dw * f16_to_f32(y.d)) + mw * f16_to_f32(y.s);
      }
    }
    store<NX>(acc, out, os);
  }
};

// ---- K-quants against Q8_K ----

// Q4_K / Q5_K: d*d_x*sum_j sc_j*sum(q*y) - dmin*d_x*sum_j mn_j*sum(y of sub-block j).
template <typename Block, bool kHighBit>
struct KQuantDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const Block*>(w);
    float acc[NX] = {};
    int8_t q[QK_K];
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const Block& blk = wb[b];
      uint8_t sc[8], mn[8];
      unpack_k_scales(blk.scales, sc, mn);
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          int lo = blk.qs[32 * c + l] & 0xF, hi = blk.qs[32 * c + l] >> 4;
          if constexpr (kHighBit) {
            lo |= ((blk.qh[l] >> (2 * c)) & 1) << 4;
            hi |= ((blk.qh[l] >> (2 * c + 1)) & 1) << 4;
          }
          q[64 * c + l] = int8_t(lo);
          q[64 * c + 32 + l] = int8_t(hi);
        }
      }
      const float dw = f16_to_f32(blk.d), dminw = f16_to_f32(blk.dmin);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_K& y = row<BlockQ8_K>(x, xs, r)[b];
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; ++j) {
          sumi += int(sc[j]) * dot_i8(q + 32 * j, y.qs + 32 * j, 32);
          summ += int(mn[j]) * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        }
        acc[r] += (dw * y.d) * float(sumi);
        acc[r] -= (dminw * y.d) * float(summ);
      }
    }
    store<NX>(acc, out, os);
  }
};

// Q6_K: d*d_x*sum_j sc_j*sum((q-32)*y) over 16 sub-blocks of 16.
struct Q6KDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const BlockQ6_K*>(w);
    float acc[NX] = {};
    int8_t q[QK_K];
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const BlockQ6_K& blk = wb[b];
      for (int n = 0; n < 2; ++n) {
        const uint8_t* ql = blk.ql + 64 * n;
        const uint8_t* qh = blk.qh + 32 * n;
        int8_t* e = q + 128 * n;
        for (int l = 0; l < 32; ++l) {
          e[l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
          e[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
          e[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          e[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
      const float dw = f16_to_f32(blk.d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_K& y = row<BlockQ8_K>(x, xs, r)[b];
        int sumi = 0;
        for (int j = 0; j < 16; ++j) sumi += blk.scales[j] * dot_i8(q + 16 * j, y.qs + 16 * j, 16);
        acc[r] += (dw * y.d) * float(sumi);
      }
    }
    store<NX>(acc, out, os);
  }
};

}  // namespace

const DotKernels& scalar_dot_kernels() {
  static const DotKernels k = {
      .f32 = dispatch_tile<FloatDot<F32W>>,
      .f16 = dispatch_tile<FloatDot<F16W>>,
      .bf16 = dispatch_tile<FloatDot<BF16W>>,
      .q5_0 = dispatch_tile<SymDot<Q5_0W>>,
      .q5_1 = dispatch_tile<MinDot<Q5_1W>>,
      .q4_k = dispatch_tile<KQuantDot<BlockQ4_K, false>>,
      .q5_k = dispatch_tile<KQuantDot<BlockQ5_K, true>>,
      .q6_k = dispatch_tile<Q6KDot>,
  };
  return k;
}

}  // namespace kestrel::cpu
