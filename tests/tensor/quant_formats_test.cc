// GGUF block formats: dequantization against decoders written here from the byte layouts of
// models.md §8.5, quantize -> dequantize error bounds, and the int8 activation formats.
#include "tensor/quant_formats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "base/fp16.h"

namespace kestrel {
namespace {

// ---- spec decoders: element i of one block, read from raw little-endian bytes ----

float half_at(const uint8_t* p) {
  return f16_to_f32(uint16_t(p[0] | (p[1] << 8)));
}

uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// Low nibbles hold elements 0..15, high nibbles 16..31.
int nibble32(const uint8_t* qs, int i) {
  return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
}

float spec_q4_0(const uint8_t* b, int i) {
  return float(nibble32(b + 2, i) - 8) * half_at(b);
}
float spec_q4_1(const uint8_t* b, int i) {
  return float(nibble32(b + 4, i)) * half_at(b) + half_at(b + 2);
}
float spec_q5_0(const uint8_t* b, int i) {
  const int q = nibble32(b + 6, i) | int(((u32_at(b + 2) >> i) & 1) << 4);
  return float(q - 16) * half_at(b);
}
float spec_q5_1(const uint8_t* b, int i) {
  const int q = nibble32(b + 8, i) | int(((u32_at(b + 4) >> i) & 1) << 4);
  return float(q) * half_at(b) + half_at(b + 2);
}
float spec_q8_0(const uint8_t* b, int i) {
  return float(int8_t(b[2 + i])) * half_at(b);
}

// 6-bit scale and min of sub-block k from the 12 packed bytes.
void spec_k_scale(const uint8_t* s, int k, int* sc, int* mn) {
  if (k < 4) {
    *sc = s[k] & 63;
    *mn = s[k + 4] & 63;
  } else {
    *sc = (s[k + 4] & 0xF) | ((s[k - 4] >> 6) << 4);
    *mn = (s[k + 4] >> 4) | ((s[k] >> 6) << 4);
  }
}

// Q4_K (qh_off < 0) and Q5_K: element 64c + l (+32 for the high nibble, sub-block 2c+1).
float spec_kquant(const uint8_t* b, int i, int qh_off, int qs_off) {
  const int c = i / 64, l = i % 32, sub = (i % 64) / 32;
  const uint8_t byte = b[qs_off + 32 * c + l];
  int q = sub ? (byte >> 4) : (byte & 0xF);
  if (qh_off >= 0) q += ((b[qh_off + l] >> (2 * c + sub)) & 1) * 16;
  int sc, mn;
  spec_k_scale(b + 4, 2 * c + sub, &sc, &mn);
  return half_at(b) * float(sc) * float(q) - half_at(b + 2) * float(mn);
}
float spec_q4_k(const uint8_t* b, int i) {
  return spec_kquant(b, i, -1, 16);
}
float spec_q5_k(const uint8_t* b, int i) {
  return spec_kquant(b, i, 16, 48);
}

// Q6_K: ql[128] qh[64] scales[16] d. In half n, group g = which 32 of its 128 elements.
float spec_q6_k(const uint8_t* b, int i) {
  const int n = i / 128, g = (i % 128) / 32, l = i % 32;
  const uint8_t low = b[64 * n + l + 32 * (g & 1)];
  const int nib = g < 2 ? (low & 0xF) : (low >> 4);
  const int high = (b[128 + 32 * n + l] >> (2 * g)) & 3;
  const int sc = int8_t(b[192 + 8 * n + l / 16 + 2 * g]);
  return half_at(b + 208) * float(sc) * float((nib | (high << 4)) - 32);
}

float spec_q8_k(const uint8_t* b, int i) {
  float d;
  std::memcpy(&d, b, 4);
  return d * float(int8_t(b[4 + i]));
}

struct Format {
  DType type;
  std::function<float(const uint8_t*, int)> decode;
  std::vector<int> half_offsets;  // f16 scale fields, made finite in random blocks
};

std::vector<Format> block_formats() {
  return {
      {DType::Q4_0, spec_q4_0, {0}},    {DType::Q4_1, spec_q4_1, {0, 2}},
      {DType::Q5_0, spec_q5_0, {0}},    {DType::Q5_1, spec_q5_1, {0, 2}},
      {DType::Q8_0, spec_q8_0, {0}},    {DType::Q4_K, spec_q4_k, {0, 2}},
      {DType::Q5_K, spec_q5_k, {0, 2}}, {DType::Q6_K, spec_q6_k, {208}},
      {DType::Q8_K, spec_q8_k, {}},
  };
}

TEST(Quant, BlockSizesMatchTheSpec) {
  const std::pair<DType, size_t> sizes[] = {
      {DType::Q4_0, sizeof(BlockQ4_0)}, {DType::Q4_1, sizeof(BlockQ4_1)},
      {DType::Q5_0, sizeof(BlockQ5_0)}, {DType::Q5_1, sizeof(BlockQ5_1)},
      {DType::Q8_0, sizeof(BlockQ8_0)}, {DType::Q4_K, sizeof(BlockQ4_K)},
      {DType::Q5_K, sizeof(BlockQ5_K)}, {DType::Q6_K, sizeof(BlockQ6_K)},
      {DType::Q8_K, sizeof(BlockQ8_K)}, {DType::Q8_1, sizeof(BlockQ8_1)},
  };
  for (const auto& [t, size] : sizes) EXPECT_EQ(size_t(dtype_info(t).block_bytes), size);
}

TEST(Quant, DequantizeMatchesSpecOnRandomBlocks) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-3.0f, 3.0f);
  for (const Format& f : block_formats()) {
    const DTypeInfo& info = dtype_info(f.type);
    const int nb = 7;
    std::vector<uint8_t> data(size_t(nb) * info.block_bytes);
    for (auto& v : data) v = uint8_t(byte(rng));
    for (int b = 0; b < nb; ++b) {
      uint8_t* blk = data.data() + size_t(b) * info.block_bytes;
      for (int off : f.half_offsets) {
        const uint16_t h = f32_to_f16(scale(rng));
        blk[off] = uint8_t(h & 0xFF);
        blk[off + 1] = uint8_t(h >> 8);
      }
      if (f.type == DType::Q8_K) {
        const float d = scale(rng) / 127.0f;
        std::memcpy(blk, &d, 4);
      }
    }
    std::vector<float> got(size_t(nb) * info.block_elems);
    dequantize_row(f.type, data.data(), got.data(), int64_t(got.size()));
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk = data.data() + size_t(b) * info.block_bytes;
      for (int i = 0; i < info.block_elems; ++i) {
        const float want = f.decode(blk, i);
        ASSERT_TRUE(std::isfinite(want));
        // Same f32 operations as the spec formula, so the results must agree exactly.
        ASSERT_EQ(got[size_t(b) * info.block_elems + i], want)
            << info.name << " block " << b << " element " << i;
      }
    }
  }
}

TEST(Quant, DequantizePlainFloats) {
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3555};
  const float half_values[] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f, 0.333251953125f};
  float out[5];
  dequantize_row(DType::F16, halves, out, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], half_values[i]);
  const uint16_t bf[] = {0x3F80, 0xC0A0, 0x3EAB};
  const float bf_values[] = {1.0f, -5.0f, 0.333984375f};
  dequantize_row(DType::BF16, bf, out, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], bf_values[i]);
  const float f[] = {1.5f, -0.25f};
  dequantize_row(DType::F32, f, out, 2);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
}

// Normal data whose scale varies by up to e^±2 between 32-element blocks (never zero).
std::vector<float> test_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float s = std::exp(log_scale(rng));
    for (int j = 0; j < 32; ++j) x[size_t(b * 32 + j)] = normal(rng) * s;
  }
  return x;
}

float amax_of(const float* x, int n) {
  float a = 0.0f;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

// Quantizes n elements to t and returns the raw blocks and the dequantized values.
std::pair<std::vector<uint8_t>, std::vector<float>> round_trip(DType t,
                                                               const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_bytes(t, int64_t(x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  return {q, y};
}

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e * e;
  return std::sqrt(s / double(v.size()));
}

constexpr int64_t kRoundTripElems = 4096;
constexpr float kF16Eps = 1.0f / 2048;  // relative rounding of an f16 value

TEST(QuantRoundTrip, PlainFloats) {
  const auto x = test_data(kRoundTripElems, 1);
  EXPECT_EQ(round_trip(DType::F32, x).second, x);
  const auto h = round_trip(DType::F16, x).second;
  const auto b = round_trip(DType::BF16, x).second;
  for (size_t i = 0; i < x.size(); ++i) {
    // Half an ulp: at most 2^-11 (f16, 10 mantissa bits) or 2^-8 (bf16, 7) of the value.
    EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * kF16Eps) << i;
    EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) / 256) << i;
  }
}

// Checks every element against a per-block bound, and the RMS error relative to each block's
// largest magnitude a: rounding to a grid of step s leaves an RMS error of s/sqrt(12), so with
// `max_step` the coarsest step the format allows (in units of a) the RMS stays below
// max_step/sqrt(12) (10% margin for blocks whose errors run above the uniform average).
void check_round_trip(
    DType t, double max_step,
    const std::function<void(const float* x, const uint8_t* blk, const float* y)>& check_block) {
  const auto x = test_data(kRoundTripElems, 2);
  const auto [q, y] = round_trip(t, x);
  const DTypeInfo& info = dtype_info(t);
  std::vector<double> rel_err(x.size());
  for (int64_t b = 0; b < kRoundTripElems / info.block_elems; ++b) {
    const int64_t o = b * info.block_elems;
    check_block(x.data() + o, q.data() + b * info.block_bytes, y.data() + o);
    // Normalized per block so blocks of every scale count equally.
    const double a = amax_of(x.data() + o, info.block_elems);
    for (int i = 0; i < info.block_elems; ++i) rel_err[o + i] = (y[o + i] - x[o + i]) / a;
  }
  EXPECT_LE(rms(rel_err), 1.1 * max_step / std::sqrt(12.0)) << info.name;
}

TEST(QuantRoundTrip, Q8_0) {
  // d = amax/127; codes round to within d/2, and the f16 d moves a code by <= 127*d*2^-11.
  check_round_trip(DType::Q8_0, 1.0 / 127, [](const float* x, const uint8_t* blk, const float* y) {
    const float d = amax_of(x, 32) / 127;
    EXPECT_EQ(half_at(blk), f16_to_f32(f32_to_f16(d)));
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), d * (0.5f + 127 * kF16Eps));
  });
}

TEST(QuantRoundTrip, Q4_0) {
  // d = (value of largest magnitude) / -8; that value gets code 0, the opposite extreme may
  // clip from +8 to +7, so elements are within one step |d| (plus f16 rounding of d).
  check_round_trip(DType::Q4_0, 1.0 / 8, [](const float* x, const uint8_t* blk, const float* y) {
    const float d = std::fabs(half_at(blk));
    EXPECT_NEAR(d, amax_of(x, 32) / 8, amax_of(x, 32) / 8 * kF16Eps);
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), d * (1 + 8 * kF16Eps));
  });
}

TEST(QuantRoundTrip, Q5_0) {
  check_round_trip(DType::Q5_0, 1.0 / 16, [](const float* x, const uint8_t* blk, const float* y) {
    const float d = std::fabs(half_at(blk));
    EXPECT_NEAR(d, amax_of(x, 32) / 16, amax_of(x, 32) / 16 * kF16Eps);
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), d * (1 + 16 * kF16Eps));
  });
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min; half a step plus f16 rounding of d
// (times the code) and of m. The range is at most 2a.
void check_min_max(DType t, int max_code) {
  check_round_trip(
      t, 2.0 / max_code, [max_code](const float* x, const uint8_t* blk, const float* y) {
        const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
        const float d = (hi - lo) / float(max_code);
        EXPECT_NEAR(half_at(blk), d, d * kF16Eps);
        EXPECT_EQ(half_at(blk + 2), f16_to_f32(f32_to_f16(lo)));
        const float bound = d * (0.5f + float(max_code) * kF16Eps) + std::fabs(lo) * kF16Eps;
        for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), bound * 1.0001f);
      });
}

TEST(QuantRoundTrip, Q4_1) {
  check_min_max(DType::Q4_1, 15);
}
TEST(QuantRoundTrip, Q5_1) {
  check_min_max(DType::Q5_1, 31);
}

// Q4_K / Q5_K: sub-block j has step s = d*sc_j and offset o = dmin*mn_j. The quantizer
// promises |error| <= s/2 (up to f16 rounding of d and dmin, bounded by 2^-10 of the block's
// largest value) and a step no coarser than (range + dmin)/max_code + d. With range <= 2a,
// dmin <= a/63 and d <= (2a + a/63)/(63*max_code), that step is below 2.05a/max_code.
void check_kquant(DType t, int max_code) {
  check_round_trip(
      t, 2.05 / max_code, [max_code](const float* x, const uint8_t* blk, const float* y) {
        const float d = half_at(blk), dmin = half_at(blk + 2), amax = amax_of(x, 256);
        EXPECT_GE(d, 0.0f);
        EXPECT_GE(dmin, 0.0f);
        for (int j = 0; j < 8; ++j) {
          int sc, mn;
          spec_k_scale(blk + 4, j, &sc, &mn);
          const float* xs = x + 32 * j;
          const float lo = std::min(0.0f, *std::min_element(xs, xs + 32));
          const float hi = std::max(0.0f, *std::max_element(xs, xs + 32));
          const float step = d * float(sc);
          EXPECT_LE(step, ((hi - lo) + dmin) / float(max_code) + d + amax * 1e-6f) << j;
          for (int l = 0; l < 32; ++l) {
            EXPECT_LE(std::fabs(y[32 * j + l] - xs[l]), step / 2 + amax * 2 * kF16Eps)
                << j << " " << l;
          }
        }
      });
}

TEST(QuantRoundTrip, Q4_K) {
  check_kquant(DType::Q4_K, 15);
}
TEST(QuantRoundTrip, Q5_K) {
  check_kquant(DType::Q5_K, 31);
}

// Q6_K: per 16-element sub-block the largest magnitude maps to code -32; the int8 scale is
// rounded away from zero so the step s = |d*sc| is at least amax_j/32 and at most that plus d.
// Elements are within half a step, or one step where +32 clips to +31. With d <= a/(32*127)
// the step is below (1 + 1/127) a/32.
TEST(QuantRoundTrip, Q6_K) {
  check_round_trip(DType::Q6_K, (1 + 1.0 / 127) / 32,
                   [](const float* x, const uint8_t* blk, const float* y) {
                     const float d = half_at(blk + 208);
                     for (int j = 0; j < 16; ++j) {
                       const float step = std::fabs(d * float(int8_t(blk[192 + j])));
                       const float a = amax_of(x + 16 * j, 16);
                       EXPECT_GE(step * (1 + kF16Eps), a / 32) << j;
                       EXPECT_LE(step, a / 32 + d * (1 + 1e-6f)) << j;
                       for (int l = 0; l < 16; ++l) {
                         EXPECT_LE(std::fabs(y[16 * j + l] - x[16 * j + l]), step * (1 + 1e-5f))
                             << j << " " << l;
                       }
                     }
                   });
}

// ---- activation formats ----

TEST(QuantActivations, Q8_0AndQ8_1FollowTheReferenceRule) {
  const int64_t n = 1024;
  const auto x = test_data(n, 3);
  std::vector<BlockQ8_0> a(n / 32);
  std::vector<BlockQ8_1> b(n / 32);
  quantize_row_q8_0(x.data(), a.data(), n);
  quantize_row_q8_1(x.data(), b.data(), n);
  for (int64_t i = 0; i < n / 32; ++i) {
    const float* xs = x.data() + i * 32;
    const float d = amax_of(xs, 32) / 127;
    EXPECT_EQ(uint16_t(a[i].d), f32_to_f16(d));
    EXPECT_EQ(uint16_t(b[i].d), f32_to_f16(d));
    int sum = 0, max_code = 0;
    for (int j = 0; j < 32; ++j) {
      const int want = int(std::round(xs[j] * (1.0f / d)));  // round half away from zero
      EXPECT_EQ(a[i].qs[j], want) << i << " " << j;
      EXPECT_EQ(b[i].qs[j], want) << i << " " << j;
      sum += want;
      max_code = std::max(max_code, std::abs(want));
    }
    EXPECT_EQ(max_code, 127);
    EXPECT_EQ(uint16_t(b[i].s), f32_to_f16(float(sum) * d));
  }
}

TEST(QuantActivations, Q8_KFollowsTheReferenceRule) {
  const int64_t n = 1024;
  const auto x = test_data(n, 4);
  std::vector<BlockQ8_K> y(n / 256);
  quantize_row_q8_k(x.data(), y.data(), n);
  for (int64_t i = 0; i < n / 256; ++i) {
    const float* xs = x.data() + i * 256;
    const int imax =
        int(std::max_element(xs, xs + 256,
                             [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
            xs);
    // The largest magnitude maps to -127: d carries the opposite sign of that value.
    EXPECT_NEAR(float(y[i].d), -xs[imax] / 127, std::fabs(xs[imax]) / 127 * 1e-6);
    EXPECT_EQ(y[i].qs[imax], -127);
    const float iscale = -127.0f / xs[imax];
    for (int j = 0; j < 256; ++j) {
      // Round half to even, as ggml's nearest_int.
      EXPECT_EQ(y[i].qs[j], std::min(127, int(std::nearbyint(iscale * xs[j])))) << i << " " << j;
      EXPECT_LE(std::fabs(y[i].d * y[i].qs[j] - xs[j]), std::fabs(y[i].d) * 0.5f * (1 + 1e-5f));
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      EXPECT_EQ(int(y[i].bsums[g]), sum) << i << " " << g;
    }
  }
}

// Ties: Q8_0/Q8_1 round half away from zero (roundf), Q8_K half to even (nearest_int). With
// the largest magnitude 127 the scale is exactly 1, so x itself is the value being rounded.
TEST(QuantActivations, TiesFollowEachFormatsRoundingRule) {
  std::vector<float> x(256, 0.25f);
  x[0] = -127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  BlockQ8_0 a;
  BlockQ8_1 b;
  BlockQ8_K k;
  quantize_row_q8_0(x.data(), &a, 32);
  quantize_row_q8_1(x.data(), &b, 32);
  quantize_row_q8_k(x.data(), &k, 256);
  const int away[] = {-127, 3, -4, 1, 0}, even[] = {-127, 2, -4, 0, 0};
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(a.qs[j], away[j]) << j;
    EXPECT_EQ(b.qs[j], away[j]) << j;
    EXPECT_EQ(k.qs[j], even[j]) << j;
  }
  EXPECT_EQ(float(k.d), 1.0f);
}

TEST(QuantActivations, ZeroBlocksGiveZeroScales) {
  std::vector<float> x(256, 0.0f);
  x[3] = 1.0f;  // only the first 32-block is non-zero
  BlockQ8_0 a[8];
  BlockQ8_K k;
  quantize_row_q8_0(x.data(), a, 256);
  EXPECT_EQ(a[0].qs[3], 127);
  EXPECT_EQ(uint16_t(a[1].d), 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(a[1].qs[j], 0);
  x[3] = 0.0f;
  quantize_row_q8_k(x.data(), &k, 256);
  EXPECT_EQ(float(k.d), 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(int(k.bsums[g]), 0);
}

TEST(QuantDeathTest, RejectsPartialBlocksAndUnsupportedTypes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> x(64, 1.0f), y(64);
  std::vector<uint8_t> q(1024);
  EXPECT_DEATH(dequantize_row(DType::Q4_0, q.data(), y.data(), 33), "not whole blocks");
  EXPECT_DEATH(quantize_row(DType::Q4_K, x.data(), q.data(), 64), "not whole blocks");
  EXPECT_DEATH(quantize_row(DType::I32, x.data(), q.data(), 64), "unsupported");
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// MXFP4 (OCP; ggml's GGUF type 39): one E8M0 byte e, then element i's E2M1 code in nibble i of
// the 16 code bytes (low nibbles 0..15). The value: the E2M1 grid point (sign bit 3) times
// 2^(e−127).
double mxfp4_spec(const uint8_t* block, int i) {
  static const double kGrid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const int code = nibble32(block + 1, i);
  return (code & 8 ? -1 : 1) * kGrid[code & 7] * std::ldexp(1.0, int(block[0]) - 127);
}

TEST(QuantMxfp4, DequantizeMatchesTheSpecForEveryExponent) {
  std::mt19937 rng(7);
  std::vector<uint8_t> blocks(256 * sizeof(BlockMXFP4));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(rng());
  // e = 0 .. 254 (255 is OCP's NaN, which no quantizer writes; ggml reads it as 2^128).
  for (int b = 0; b < 255; ++b) blocks[b * sizeof(BlockMXFP4)] = uint8_t(b);
  std::vector<float> y(256 * 32);
  dequantize_row(DType::MXFP4, blocks.data(), y.data(), int64_t(y.size()));
  for (int b = 0; b < 255; ++b)
    for (int i = 0; i < 32; ++i)
      // As f32 (values past its range, 4 or 6 units at e = 254, are infinite there).
      ASSERT_EQ(y[b * 32 + i], float(mxfp4_spec(blocks.data() + b * sizeof(BlockMXFP4), i)))
          << "e " << b << " element " << i;
}

// The reference quantizer (deepseek-v4-family.md): scale 2^ceil(log2(max(amax, 6·2^-126) / 6)),
// E2M1 rounding to the nearest grid point with midpoints to the even code, clamped at ±6.
TEST(QuantMxfp4, QuantizerFollowsTheReferenceRule) {
  float x[32] = {};
  // amax 6 → scale 1: the values read as grid units directly.
  const float in[] = {6.0f, 0.25f,  0.75f,  1.25f, 1.75f, 2.5f, 3.5f,
                      5.0f, -0.25f, -0.75f, -5.0f, 0.3f,  2.9f, -4.4f};
  const float want[] = {6.0f, 0.0f, 1.0f,  1.0f,  2.0f, 2.0f, 4.0f,
                        4.0f, 0.0f, -1.0f, -4.0f, 0.5f, 3.0f, -4.0f};
  std::copy(std::begin(in), std::end(in), x);
  BlockMXFP4 b;
  quantize_row(DType::MXFP4, x, &b, 32);
  EXPECT_EQ(b.e, 127);
  float y[32];
  dequantize_row(DType::MXFP4, &b, y, 32);
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(y[i], want[i]) << "x = " << in[i];
  // amax 7 → scale 2^ceil(log2(7/6)) = 2: 7 is 3.5 units, a midpoint, so the even code (4 units,
  // 8); an all-zero block takes the floor scale.
  x[0] = 7.0f;
  quantize_row(DType::MXFP4, x, &b, 32);
  EXPECT_EQ(b.e, 128);
  dequantize_row(DType::MXFP4, &b, y, 32);
  EXPECT_EQ(y[0], 8.0f);
  std::fill(std::begin(x), std::end(x), 0.0f);
  quantize_row(DType::MXFP4, x, &b, 32);
  EXPECT_EQ(b.e, 1);  // 2^-126
  dequantize_row(DType::MXFP4, &b, y, 32);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(QuantMxfp4, IsGgufType39) {
  EXPECT_EQ(dtype_from_ggml(39), DType::MXFP4);
  EXPECT_EQ(dtype_info(DType::MXFP4).block_elems, 32);
  EXPECT_EQ(dtype_info(DType::MXFP4).block_bytes, 17);
}

// The released column-pair layout: column c's code in byte c / 2 (low nibble for even c), and
// scale [row][c / 32]; the same values once rewritten as blocks.
TEST(QuantMxfp4, ColumnPairsBecomeTheSameValues) {
  const int64_t rows = 3, cols = 96;
  std::mt19937 rng(5);
  std::vector<uint8_t> codes(rows * cols / 2), scales(rows * cols / 32);
  for (auto& c : codes) c = uint8_t(rng());
  for (auto& e : scales) e = uint8_t(100 + rng() % 50);
  std::vector<BlockMXFP4> blocks(rows * cols / 32);
  mxfp4_from_column_pairs(codes.data(), scales.data(), rows, cols, blocks.data());
  std::vector<float> y(rows * cols);
  dequantize_row(DType::MXFP4, blocks.data(), y.data(), rows * cols);
  static const double kGrid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = codes[(r * cols + c) / 2];
      const int code = c % 2 == 0 ? byte & 0xF : byte >> 4;
      const double want = (code & 8 ? -1 : 1) * kGrid[code & 7] *
                          std::ldexp(1.0, int(scales[r * cols / 32 + c / 32]) - 127);
      ASSERT_EQ(double(y[r * cols + c]), want) << "row " << r << " column " << c;
    }
}

TEST(QuantRoundTrip, MXFP4) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(32 * 64), y(x.size());
  for (float& v : x) v = nd(rng);
  std::vector<BlockMXFP4> q(64);
  quantize_row(DType::MXFP4, x.data(), q.data(), int64_t(x.size()));
  dequantize_row(DType::MXFP4, q.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < 64; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    // The scale is at most amax / 3 and the grid's widest gap (4 to 6) two units of it.
    for (int i = 0; i < 32; ++i)
      ASSERT_LE(std::fabs(y[b * 32 + i] - x[b * 32 + i]), amax / 3.0f + 1e-6f) << b << " " << i;
  }
}

}  // namespace
}  // namespace kestrel
