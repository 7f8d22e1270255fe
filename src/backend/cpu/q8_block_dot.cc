// The portable kernels of q8_block_dot.h: the arithmetic written out, one output at a time.
#include "backend/cpu/q8_block_dot.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/packed_matmul.h"
#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

// The block's signed codes (what c counts) and, for Q4_1, whether it has a min.
template <DType T>
struct Codes;
template <>
struct Codes<DType::Q4_0> {
  using Block = BlockQ4_0;
  static void get(const Block& b, int8_t* q) {
    for (int j = 0; j < QK / 2; ++j) {
      q[j] = int8_t((b.qs[j] & 0xF) - 8);
      q[j + QK / 2] = int8_t((b.qs[j] >> 4) - 8);
    }
  }
};
template <>
struct Codes<DType::Q4_1> {
  using Block = BlockQ4_1;
  static void get(const Block& b, int8_t* q) {
    for (int j = 0; j < QK / 2; ++j) {
      q[j] = int8_t(b.qs[j] & 0xF);
      q[j + QK / 2] = int8_t(b.qs[j] >> 4);
    }
  }
};
// Q5_0 and Q5_1: the low four bits from qs as Q4_0/Q4_1, the fifth from bit j of qh.
inline int q5_code(const uint8_t* qs, const uint8_t* qh, int j) {
  const int nib = j < QK / 2 ? (qs[j] & 0xF) : (qs[j - QK / 2] >> 4);
  return nib | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}
template <>
struct Codes<DType::Q5_0> {
  using Block = BlockQ5_0;
  static void get(const Block& b, int8_t* q) {
    for (int j = 0; j < QK; ++j) q[j] = int8_t(q5_code(b.qs, b.qh, j) - 16);
  }
};
template <>
struct Codes<DType::Q5_1> {
  using Block = BlockQ5_1;
  static void get(const Block& b, int8_t* q) {
    for (int j = 0; j < QK; ++j) q[j] = int8_t(q5_code(b.qs, b.qh, j));
  }
};
template <>
struct Codes<DType::Q8_0> {
  using Block = BlockQ8_0;
  static void get(const Block& b, int8_t* q) {
    for (int j = 0; j < QK; ++j) q[j] = b.qs[j];
  }
};

template <>
struct Codes<DType::MXFP4> {
  using Block = BlockMXFP4;
  static void get(const Block& b, int8_t* q) {
    for (int j = 0; j < QK / 2; ++j) {
      q[j] = kMxfp4Values[b.qs[j] & 0xF];
      q[j + QK / 2] = kMxfp4Values[b.qs[j] >> 4];
    }
  }
};

// A block's d_w: f16, or MXFP4's power of two.
template <typename Block>
float block_scale(const Block& b) {
  return f16_to_f32(b.d);
}
float block_scale(const BlockMXFP4& b) {
  return mxfp4_scale(b.e);
}

template <DType T>
void rows_dot(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int nx, int64_t k,
              float* out, int64_t os) {
  using Block = typename Codes<T>::Block;
  const int64_t nb = k / QK;
  nx = std::min(nx, kMaxTileRows);
  const BlockQ8S* xr[kMaxTileRows];
  for (int r = 0; r < nx; ++r)
    xr[r] = reinterpret_cast<const BlockQ8S*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
  int8_t q[QK];
  for (int64_t j = 0; j < nw; ++j) {
    const auto* wb =
        reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + size_t(j) * ws);
    float acc[kMaxTileRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      Codes<T>::get(wb[b], q);  // once for every activation row
      const float dw = block_scale(wb[b]);
      for (int r = 0; r < nx; ++r) {
        const BlockQ8S& y = xr[r][b];
        int32_t c = 0;
        for (int i = 0; i < QK; ++i) c += int32_t(q[i]) * int32_t(y.qs[i]);
        const float t = float(c) * y.d;
        acc[r] = std::fma(t, dw, acc[r]);
        if constexpr (T == DType::Q4_1 || T == DType::Q5_1)
          acc[r] = std::fma(f16_to_f32(wb[b].m), y.s, acc[r]);
      }
    }
    for (int r = 0; r < nx; ++r) out[r * os + j] = acc[r];
  }
}

const Q8BlockKernels kScalar{rows_dot<DType::Q4_0>, rows_dot<DType::Q4_1>, rows_dot<DType::Q5_0>,
                             rows_dot<DType::Q5_1>, rows_dot<DType::Q8_0>, rows_dot<DType::MXFP4>,
                             kMaxTileRows};

}  // namespace

void quantize_row_q8s(const float* x, BlockQ8S* y, int64_t k) {
  KCHECK(k % QK == 0, "q8s row of {} elements is not whole blocks", k);
  for (int64_t b = 0; b < k / QK; ++b) {
    const Q8BlockScale s = quantize_q8_block(x + b * QK, y[b].qs);
    y[b].d = s.d;
    y[b].s = s.d * float(s.sum);
  }
}

const Q8BlockKernels& scalar_q8_block_kernels() {
  return kScalar;
}

}  // namespace kestrel::cpu
