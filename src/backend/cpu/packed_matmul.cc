#include "backend/cpu/packed_matmul.h"

#include <immintrin.h>

#include <cstring>

#include "base/status.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

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
  const bool type_ok = w.dtype == DType::Q4_0 || w.dtype == DType::Q4_1 || w.dtype == DType::Q5_0 ||
                       w.dtype == DType::Q5_1 || w.dtype == DType::Q8_0;
  return type_ok && w.shape.ndim == 2 && w.cols() % QK == 0 && w.cols() > 0 && w.rows() > 0;
}

namespace {

// One GGUF block's parts, whatever its type: the code bytes (nibbles or bytes), the fifth bits
// (Q5) and the scales.
struct StoredBlock {
  const uint8_t* qs;
  const uint8_t* qh = nullptr;
  uint16_t d, m = 0;
};

StoredBlock stored_block(DType t, const uint8_t* row, int64_t b) {
  switch (t) {
    case DType::Q4_0: {
      const auto& q = reinterpret_cast<const BlockQ4_0*>(row)[b];
      return {q.qs, nullptr, q.d};
    }
    case DType::Q4_1: {
      const auto& q = reinterpret_cast<const BlockQ4_1*>(row)[b];
      return {q.qs, nullptr, q.d, q.m};
    }
    case DType::Q5_0: {
      const auto& q = reinterpret_cast<const BlockQ5_0*>(row)[b];
      return {q.qs, q.qh, q.d};
    }
    case DType::Q5_1: {
      const auto& q = reinterpret_cast<const BlockQ5_1*>(row)[b];
      return {q.qs, q.qh, q.d, q.m};
    }
    default: {
      const auto& q = reinterpret_cast<const BlockQ8_0*>(row)[b];
      return {reinterpret_cast<const uint8_t*>(q.qs), nullptr, q.d};
    }
  }
}

}  // namespace

std::unique_ptr<uint8_t[]> pack_weight(const Tensor& w) {
  KCHECK(packable(w), "pack_weight: {} [{}] is not packable", dtype_name(w.dtype), w.shape.str());
  const int64_t n = w.rows(), k = w.cols(), nb = k / QK;
  const size_t block_bytes = packed_block_bytes(w.dtype), codes = packed_block_code_bytes(w.dtype);
  const size_t panel_bytes = packed_panel_bytes(w.dtype, k);
  const size_t total = size_t(packed_panels(n)) * panel_bytes;
  // Zero-filled (make_unique value-initialises): padding rows of a last panel have codes and
  // scales 0, so they add nothing.
  auto out = std::make_unique<uint8_t[]>(total);
  // GGUF keeps element j of a Q4/Q5 block in the low nibble of qs[j] and element j + 16 in its
  // high nibble, which is exactly chunk j / 4's byte pair (quad rows t and t + 4): each row's
  // lane of a chunk is four bytes of qs as they are. Q8_0's quad row q is qs[4q .. 4q+3], offset
  // by 128. Q5's fifth bit of element j is bit j of qh.
  for (int64_t r = 0; r < n; ++r) {
    const int pr = int(r % kPanelRows);
    uint8_t* panel = out.get() + size_t(r / kPanelRows) * panel_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block = panel + size_t(b) * block_bytes;
      const StoredBlock s = stored_block(w.dtype, w.row(r), b);
      auto* d = reinterpret_cast<uint16_t*>(block + codes);
      d[pr] = s.d;
      if (packed_has_min(w.dtype)) d[kPanelRows + pr] = s.m;
      const int quads = w.dtype == DType::Q8_0 ? 8 : 4;
      for (int q = 0; q < quads; ++q) {
        uint32_t lane;
        std::memcpy(&lane, s.qs + 4 * q, sizeof(lane));
        if (w.dtype == DType::Q8_0) lane ^= 0x80808080u;
        std::memcpy(block + 64 * q + 4 * pr, &lane, sizeof(lane));
      }
      if (s.qh != nullptr) {
        uint8_t* plane = block + kPanelBlockCodes / 2;
        for (int e = 0; e < QK; ++e) {
          const HighBitSlot slot = packed_high_bit_slot(pr, e);
          plane[slot.byte] |= uint8_t(((s.qh[e / 8] >> (e % 8)) & 1) << slot.bit);
        }
      }
    }
  }
  return out;
}

size_t packed_activation_scale_bytes(int64_t m, int64_t k) {
  return size_t(packed_activation_rows(m) / kPanelRows) * size_t(k / QK) * 3 * kPanelRows *
         sizeof(float);
}

Q8BlockScale quantize_q8_block(const float* x, int8_t* codes) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
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
  __m256i q32[4];
  for (int i = 0; i < 4; ++i) {
    __m256 q = round_away(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
    q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    q32[i] = _mm256_cvttps_epi32(q);
  }
  // Narrow to 32 int8 codes in element order (packs interleave 128-bit lanes; the permute
  // undoes it).
  const __m256i q16a = _mm256_packs_epi32(q32[0], q32[1]);
  const __m256i q16b = _mm256_packs_epi32(q32[2], q32[3]);
  const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b),
                                                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), q8);
  __m256i acc =
      _mm256_add_epi32(_mm256_add_epi32(q32[0], q32[1]), _mm256_add_epi32(q32[2], q32[3]));
  acc = _mm256_hadd_epi32(acc, acc);
  acc = _mm256_hadd_epi32(acc, acc);
  const int sum = _mm256_extract_epi32(acc, 0) + _mm256_extract_epi32(acc, 4);
  // d rounded to f16 as f32_to_f16 does (nearest even), in one F16C round trip.
  const float dr = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return {dr, sum};
}

void quantize_row_packed(const float* x, int8_t* codes, float* scales, int64_t row, int64_t k) {
  KCHECK(k % QK == 0, "packed activation row of {} elements is not whole blocks", k);
  const int64_t nb = k / QK, tile = row / kPanelRows;
  const int lane = int(row % kPanelRows);
  for (int64_t b = 0; b < nb; ++b) {
    const Q8BlockScale q = quantize_q8_block(x + b * QK, codes + b * QK);
    float* s = scales + (tile * nb + b) * 3 * kPanelRows;
    s[lane] = q.d;
    s[kPanelRows + lane] = q.d * float(q.sum);
    std::memcpy(s + 2 * kPanelRows + lane, &q.sum, sizeof(q.sum));
  }
}

}  // namespace kestrel::cpu
