#include "backend/cpu/packed_matmul.h"

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant.h"
#include "base/fp16.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

constexpr int64_t kPairElems = 2 * QK;

// Offset in a pair's 64 codes of element e (0..31) of block h (0 or 1).
int pair_offset(int h, int e) {
  return e < 16 ? h * 16 + e : 32 + h * 16 + (e - 16);
}

size_t code_bytes_per_pair(DType t) {
  return t == DType::Q8_0 ? 64 : 32;
}

// Round half away from zero, exactly as std::round.
__m256 round_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_sub_ps(v, t);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 half =
      _mm256_cmp_ps(_mm256_andnot_ps(sign_mask, frac), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign_mask, v));
  return _mm256_add_ps(t, _mm256_and_ps(half, one));
}

}  // namespace

bool packable(const Tensor& w) {
  const bool type_ok = w.dtype == DType::Q4_0 || w.dtype == DType::Q4_1 || w.dtype == DType::Q8_0;
  return type_ok && w.shape.ndim == 2 && w.cols() % kPairElems == 0 && w.cols() > 0;
}

size_t packed_weight_row_bytes(DType t, int64_t k) {
  const int64_t pairs = k / kPairElems;
  const size_t scales = t == DType::Q4_1 ? 2 : 1;
  return size_t(pairs) * code_bytes_per_pair(t) + size_t(k / QK) * scales * sizeof(uint16_t);
}

std::unique_ptr<uint8_t[]> pack_weight(const Tensor& w) {
  KCHECK(packable(w), "pack_weight: {} [{}] is not packable", dtype_name(w.dtype), w.shape.str());
  const int64_t n = w.rows(), k = w.cols(), nb = k / QK;
  const size_t stride = packed_weight_row_bytes(w.dtype, k);
  const size_t codes = size_t(k / kPairElems) * code_bytes_per_pair(w.dtype);
  auto out = std::make_unique<uint8_t[]>(size_t(n) * stride);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* dst = out.get() + size_t(r) * stride;
    auto* d = reinterpret_cast<uint16_t*>(dst + codes);
    uint16_t* m = d + nb;  // Q4_1 only
    const uint8_t* src = w.row(r);
    for (int64_t b = 0; b < nb; ++b) {
      const int h = int(b % 2);
      uint8_t* pair = dst + size_t(b / 2) * code_bytes_per_pair(w.dtype);
      if (w.dtype == DType::Q4_0) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(src)[b];
        std::memcpy(pair + h * 16, blk.qs, 16);
        d[b] = blk.d;
      } else if (w.dtype == DType::Q4_1) {
        const auto& blk = reinterpret_cast<const BlockQ4_1*>(src)[b];
        std::memcpy(pair + h * 16, blk.qs, 16);
        d[b] = blk.d;
        m[b] = blk.m;
      } else {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(src)[b];
        for (int e = 0; e < QK; ++e) pair[pair_offset(h, e)] = uint8_t(blk.qs[e]) ^ 0x80;
        d[b] = blk.d;
      }
    }
  }
  return out;
}

size_t packed_activation_row_bytes(int64_t k) {
  return size_t(k / kPairElems) * kPackedActivationPairBytes + size_t(k / QK) * sizeof(float);
}

void quantize_row_packed(const float* x, uint8_t* dst, int64_t k) {
  KCHECK(k % kPairElems == 0, "packed activation row of {} elements is not whole block pairs", k);
  const int64_t nb = k / QK;
  auto* sums = reinterpret_cast<float*>(dst + (k / kPairElems) * kPackedActivationPairBytes);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < nb; ++b, x += QK) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], abs_mask));
    }
    amax = _mm256_max_ps(amax, _mm256_permute2f128_ps(amax, amax, 1));
    amax = _mm256_max_ps(amax, _mm256_shuffle_ps(amax, amax, _MM_SHUFFLE(1, 0, 3, 2)));
    amax = _mm256_max_ps(amax, _mm256_shuffle_ps(amax, amax, _MM_SHUFFLE(2, 3, 0, 1)));
    const float d = _mm256_cvtss_f32(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    alignas(32) int32_t codes[QK];
    for (int i = 0; i < 4; ++i) {
      __m256 q = round_away(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
      q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes + 8 * i), _mm256_cvttps_epi32(q));
    }
    const int h = int(b % 2);
    uint8_t* pair = dst + (b / 2) * kPackedActivationPairBytes;
    int sum = 0;
    for (int e = 0; e < QK; ++e) {
      pair[pair_offset(h, e)] = uint8_t(int8_t(codes[e]));
      sum += codes[e];
    }
    const float dr = f16_to_f32(f32_to_f16(d));
    // Lanes 4h..4h+3 and 8+4h..8+4h+3 of the pair's scale vector hold this block's bytes.
    auto* lanes = reinterpret_cast<float*>(pair + kPairElems);
    for (int i = 0; i < 4; ++i) lanes[4 * h + i] = lanes[8 + 4 * h + i] = dr;
    sums[b] = dr * float(sum);
  }
}

}  // namespace kestrel::cpu
