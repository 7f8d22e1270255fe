#include "backend/cpu/rope.h"

#include <immintrin.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/simd_math.h"

namespace kestrel::cpu {

namespace {

// The cos and sin of each pair, kept by the thread's arena: write_kv calls this once per token,
// on every layer.
struct RopeTables {
  std::vector<float> cos_t, sin_t;
};

}  // namespace

void apply_rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
                const RopeParams& p, ScratchArena* scratch) {
  const int half = p.rot_dim / 2;
  ScratchArena own;
  RopeTables& tables = (scratch != nullptr ? *scratch : own).get<RopeTables>();
  std::vector<float>&cos_t = tables.cos_t, &sin_t = tables.sin_t;
  cos_t.resize(size_t(half));
  sin_t.resize(size_t(half));
  for (int64_t t = 0; t < n_tokens; ++t) {
    // Angles in f32 as the reference computes them (position × inv_freq, then cos/sin).
    const float pos = float(positions[t]);
    for (int i = 0; i < half; ++i) {
      const float theta = pos * p.inv_freq[i];
      cos_t[i] = round_to(p.act, std::cos(theta) * p.attention_factor);
      sin_t[i] = round_to(p.act, std::sin(theta) * p.attention_factor);
    }
    // r(a·c − b·s): each product and the difference rounded in the activation dtype.
    auto rot = [&](float a, float c, float b, float s) {
      if (p.act == DType::F32) return a * c + b * s;
      return round_to(p.act, round_to(p.act, a * c) + round_to(p.act, b * s));
    };
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      if (p.interleaved) {
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = rot(a, cos_t[i], -b, sin_t[i]);
          v[2 * i + 1] = rot(b, cos_t[i], a, sin_t[i]);
        }
      } else {
        int i = 0;
        if (p.act != DType::F32) {
          // Eight pairs at a time, each product and sum rounded as rot rounds it.
          const DType act = p.act;
          auto rot8 = [act](__m256 a, __m256 c, __m256 b, __m256 s) {
            return simd::round_to8(act, _mm256_add_ps(simd::round_to8(act, _mm256_mul_ps(a, c)),
                                                      simd::round_to8(act, _mm256_mul_ps(b, s))));
          };
          const __m256 sign = _mm256_set1_ps(-0.0f);
          for (; i + 8 <= half; i += 8) {
            const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
            const __m256 c = _mm256_loadu_ps(cos_t.data() + i),
                         s = _mm256_loadu_ps(sin_t.data() + i);
            _mm256_storeu_ps(v + i, rot8(a, c, _mm256_xor_ps(b, sign), s));
            _mm256_storeu_ps(v + i + half, rot8(b, c, a, s));
          }
        }
        for (; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = rot(a, cos_t[i], -b, sin_t[i]);
          v[i + half] = rot(b, cos_t[i], a, sin_t[i]);
        }
      }
    }
  }
}

}  // namespace kestrel::cpu
