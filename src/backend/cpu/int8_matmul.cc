// Portable int8 kernel (the reference for the SIMD one), activation quantization, kernel choice.
#include "backend/cpu/int8_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/packed_matmul.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

const uint8_t* codes_of(const void* x, size_t xs, int r) {
  return static_cast<const uint8_t*>(x) + size_t(r) * xs + kInt8ActHeaderBytes;
}
float scale_of(const void* x, size_t xs, int r) {
  float a;
  std::memcpy(&a, static_cast<const uint8_t*>(x) + size_t(r) * xs, sizeof a);
  return a;
}

struct Int8Dot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const Int8Row& row = *static_cast<const Int8Row*>(w);
    for (int r = 0; r < NX; ++r) {
      const uint8_t* q = codes_of(x, xs, r);
      int32_t acc = row.bias;
      for (int64_t i = 0; i < k; ++i) acc += (int32_t(q[i]) - 128) * int32_t(row.codes[i]);
      out[r * os] = float(acc) * scale_of(x, xs, r) * row.scale;
    }
  }
};

constexpr Int8Kernels kScalarInt8Kernels = {dispatch_tile<Int8Dot>, kMaxTileRows};

}  // namespace

size_t int8_activation_row_bytes(int64_t k) {
  return kInt8ActHeaderBytes + (size_t(k) + 63) / 64 * 64;
}

void quantize_int8_row(const WeightScales& w, const float* x, int64_t k, uint8_t* dst) {
  float a = 1.0f;
  uint8_t* q = dst + kInt8ActHeaderBytes;
  // Eight lanes at a time with the scalar loop's operations (an IEEE division, then round half
  // to even, the default mode, as torch.round), so the same codes; a prefill quantizes every
  // token's row for every int8 linear.
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  auto store8 = [&](int64_t i, __m256 v) {
    const __m256i c = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(128));
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packus_epi16(h, h));
  };
  int64_t i = 0;
  if (w.act_scale == 0.0f) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m8 = _mm256_setzero_ps();
    for (; i + 8 <= k; i += 8)
      m8 = _mm256_max_ps(m8, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m8);
    float amax = *std::max_element(lanes, lanes + 8);
    for (; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
    a = amax / 127.0f;
    i = 0;
    if (a > 0.0f) {
      const __m256 a8 = _mm256_set1_ps(a);
      for (; i + 8 <= k; i += 8)
        store8(i, _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), a8), kRound));
    }
    for (; i < k; ++i) q[i] = uint8_t(int(a > 0.0f ? std::nearbyint(x[i] / a) : 0.0f) + 128);
  } else {
    const __m256 s8 = _mm256_set1_ps(w.act_scale), o8 = _mm256_set1_ps(w.act_offset);
    for (; i + 8 <= k; i += 8) {
      const __m256 v =
          _mm256_round_ps(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s8), o8), kRound);
      store8(i, _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f)));
    }
    for (; i < k; ++i) {
      const float v = std::nearbyint(x[i] / w.act_scale + w.act_offset);
      q[i] = uint8_t(int(std::clamp(v, -128.0f, 127.0f)) + 128);
    }
  }
  std::memcpy(dst, &a, sizeof a);
  std::memset(q + k, 0, int8_activation_row_bytes(k) - kInt8ActHeaderBytes - size_t(k));
}

size_t int8_packed_panel_bytes(int64_t k) {
  return 64 + size_t((k + 63) / 64) * 64 * kPanelRows;
}

std::unique_ptr<uint8_t[]> pack_int8_weight(const Tensor& w) {
  KCHECK(w.dtype == DType::I8 && w.shape.ndim == 2, "pack_int8_weight: a 2-D I8 weight");
  const int64_t n = w.rows(), k = w.cols(), panels = (n + kPanelRows - 1) / kPanelRows;
  const size_t panel_bytes = int8_packed_panel_bytes(k);
  auto out = std::make_unique<uint8_t[]>(size_t(panels) * panel_bytes);
  std::memset(out.get(), 0, size_t(panels) * panel_bytes);
  const auto* codes = static_cast<const int8_t*>(w.data);
  for (int64_t p = 0; p < panels; ++p) {
    uint8_t* panel = out.get() + size_t(p) * panel_bytes;
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < n; ++r) {
      const int8_t* row = codes + (p * kPanelRows + r) * k;
      int32_t sum = 0;
      for (int64_t c = 0; c < k; ++c) {
        sum += row[c];
        const int64_t b = c / 32, e = c % 32;
        panel[64 + size_t(b) * 32 * kPanelRows + size_t(e / 4) * 64 + size_t(4 * r + e % 4)] =
            uint8_t(row[c]);
      }
      std::memcpy(panel + 4 * r, &sum, sizeof sum);
    }
  }
  return out;
}

bool fits_int4(const Tensor& w) {
  const auto* codes = static_cast<const int8_t*>(w.data);
  return w.dtype == DType::I8 &&
         std::all_of(codes, codes + w.numel(), [](int8_t c) { return c >= -8 && c <= 7; });
}

size_t int4_packed_panel_bytes(int64_t k) {
  return 64 + size_t((k + 63) / 64) * 32 * kPanelRows;
}

std::unique_ptr<uint8_t[]> pack_int4_weight(const Tensor& w) {
  KCHECK(w.dtype == DType::I8 && w.shape.ndim == 2 && fits_int4(w),
         "pack_int4_weight: a 2-D I8 weight of int4 codes");
  const int64_t n = w.rows(), k = w.cols(), panels = (n + kPanelRows - 1) / kPanelRows;
  const size_t panel_bytes = int4_packed_panel_bytes(k);
  // Nibble 8 is code 0: padding columns and rows multiply to nothing.
  auto out = std::make_unique<uint8_t[]>(size_t(panels) * panel_bytes);
  std::memset(out.get(), 0x88, size_t(panels) * panel_bytes);
  const auto* codes = static_cast<const int8_t*>(w.data);
  for (int64_t p = 0; p < panels; ++p) {
    uint8_t* panel = out.get() + size_t(p) * panel_bytes;
    std::memset(panel, 0, 64);
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < n; ++r) {
      const int8_t* row = codes + (p * kPanelRows + r) * k;
      int32_t sum = 0;
      for (int64_t c = 0; c < k; ++c) {
        sum += row[c];
        // Quad row j of the chunk: j < 8 in the low nibbles of vector j, else the high of j - 8.
        const int64_t chunk = c / 64, j = (c % 64) / 4;
        uint8_t& byte = panel[64 + size_t(chunk) * 32 * kPanelRows + size_t(j % 8) * 64 +
                              size_t(4 * r + c % 4)];
        const auto nibble = uint8_t(row[c] + 8);
        byte = j < 8 ? uint8_t((byte & 0xF0) | nibble) : uint8_t((byte & 0x0F) | (nibble << 4));
      }
      std::memcpy(panel + 4 * r, &sum, sizeof sum);
    }
  }
  return out;
}

Int8Row int8_row(const LinearWeight& w, int64_t j) {
  const WeightScales& s = w.scales;
  KCHECK(w.w.dtype == DType::I8 && s.block != nullptr && s.block_rows == 1,
         "int8_row: an I8 weight needs one scale per row");
  return {static_cast<const int8_t*>(w.w.data) + j * w.cols(), s.block[j],
          s.row_bias != nullptr ? s.row_bias[j] : 0};
}

const Int8Kernels& scalar_int8_kernels() {
  return kScalarInt8Kernels;
}

const Int8Kernels& int8_kernels(std::string_view isa) {
  const Int8Kernels* k = isa == "avx512" ? avx512_int8_kernels() : nullptr;
  if (k == nullptr && (isa == "avx512" || isa == "avx2")) k = avx2_int8_kernels();
  return k != nullptr ? *k : scalar_int8_kernels();
}

}  // namespace kestrel::cpu
