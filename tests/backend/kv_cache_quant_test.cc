// Quantized KV caches (backend/cpu/cache_rows.h): the FP8 codes (every code, ties, saturation),
// the MX scale rule, the C8 int8 and MXFP8 row formats against formulas written out here, and
// attention over each quantized cache against the same attention over an f32 cache holding the
// values its codes decode to (by this file's decoders, not the kernels' widening).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cache_rows.h"
#include "backend/cpu/mla_attention.h"
#include "backend/cpu/paged_attention.h"
#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

// e5m2 as its definition reads: s eeeee mm, bias 15, e = 0 subnormal, e = 31 inf/NaN.
double e5m2_value(uint8_t c) {
  const int e = (c >> 2) & 31, m = c & 3;
  const double mag = e == 0 ? m * std::ldexp(1.0, -16) : (1 + m / 4.0) * std::ldexp(1.0, e - 15);
  return (c & 0x80) ? -mag : mag;
}
double e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (c & 0x80) ? -mag : mag;
}

TEST(Fp8Codes, E5M2DecodesAsDefinedAndEveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (((c >> 2) & 31) == 31) continue;  // inf / NaN
    EXPECT_EQ(double(fp8_e5m2_to_f32(uint8_t(c))), e5m2_value(uint8_t(c))) << c;
    if (c == 0x80) continue;  // -0 encodes as itself or +0; both are zero
    EXPECT_EQ(f32_to_fp8_e5m2(fp8_e5m2_to_f32(uint8_t(c))), c) << c;
  }
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F || c == 0x80) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(float(e4m3_value(uint8_t(c)))), c) << c;
  }
}

// Halfway between neighbouring codes goes to the even one; a hair above goes up.
TEST(Fp8Codes, TiesRoundToEvenBothFormats) {
  for (int c = 1; c < 0x7B; ++c) {
    const double lo = e5m2_value(uint8_t(c - 1)), hi = e5m2_value(uint8_t(c));
    const float mid = float((lo + hi) / 2);
    EXPECT_EQ(f32_to_fp8_e5m2(mid), (c - 1) % 2 == 0 ? c - 1 : c) << c;
    EXPECT_EQ(f32_to_fp8_e5m2(std::nextafter(mid, 1e9f)), c) << c;
  }
  for (int c = 1; c < 0x7E; ++c) {
    const double lo = e4m3_value(uint8_t(c - 1)), hi = e4m3_value(uint8_t(c));
    const float mid = float((lo + hi) / 2);
    EXPECT_EQ(f32_to_fp8_e4m3(mid), (c - 1) % 2 == 0 ? c - 1 : c) << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-std::nextafter(mid, 1e9f)), 0x80 | c) << c;
  }
}

TEST(Fp8Codes, OutOfRangeSaturates) {
  for (float x : {500.0f, 1e6f, INFINITY}) {
    EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(x)), kFp8E4M3Max);
    EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-x)), -kFp8E4M3Max);
  }
  for (float x : {61440.0f, 1e9f, INFINITY})
    EXPECT_EQ(fp8_e5m2_to_f32(f32_to_fp8_e5m2(x)), kFp8E5M2Max);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(NAN))));
}

TEST(MxScale, IsThePowerOfTwoThatPutsTheBlockMaxIn256To512) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ex(-60.0f, 60.0f);
  for (int i = 0; i < 2000; ++i) {
    const float amax = std::exp2(ex(rng));
    const uint8_t e = mx_e4m3_scale(amax);
    const double s = std::ldexp(1.0, int(e) - 127);
    EXPECT_EQ(double(e8m0_to_f32(e)), s);
    EXPECT_GE(amax / s, 256.0) << amax;
    EXPECT_LT(amax / s, 512.0) << amax;
  }
  EXPECT_EQ(mx_e4m3_scale(0.0f), 0);  // the clamp: 2^-127
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

// One group of 32 spans [amax/2^10, amax]; the second group is all zero.
TEST(CacheRows, Mxfp8RowIsCodesThenOneScalePerGroup) {
  const int n = 64;
  std::vector<float> x(n, 0.0f);
  for (int i = 0; i < 32; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * 3.7f * std::exp2(-float(i) / 3.1f);
  std::vector<uint8_t> row(dtype_bytes(DType::MXFP8, n), 0xAA);
  ASSERT_EQ(row.size(), 66u);
  store_cache_row({DType::MXFP8}, x.data(), row.data(), n);
  const uint8_t e0 = mx_e4m3_scale(3.7f);
  EXPECT_EQ(row[64], e0);
  EXPECT_EQ(row[65], mx_e4m3_scale(0.0f));
  const double s = std::ldexp(1.0, int(e0) - 127);
  std::vector<float> back(n);
  widen_cache_row({DType::MXFP8}, row.data(), back.data(), n);
  for (int i = 0; i < n; ++i) {
    const uint8_t code = f32_to_fp8_e4m3(float(x[i] / s));
    EXPECT_EQ(row[i], code) << i;
    EXPECT_EQ(double(back[i]), e4m3_value(code) * s) << i;
  }
}

TEST(CacheRows, C8IsClampedRoundedCodesWithOffsets) {
  const int n = 24;
  std::vector<float> x(n), scale(n), offset(n);
  for (int i = 0; i < n; ++i) {
    x[i] = float(i - 12) * 0.37f;
    scale[i] = 0.01f + 0.002f * float(i);
    offset[i] = float(i % 5) - 2.0f;
  }
  x[3] = 1e4f;    // clamps to 127
  x[20] = -1e4f;  // clamps to -128
  const CacheRowCodec c{DType::I8, scale.data(), offset.data()};
  std::vector<uint8_t> row(n);
  store_cache_row(c, x.data(), row.data(), n);
  std::vector<float> back(32);
  widen_cache_row(c, row.data(), back.data(), n);
  for (int i = 0; i < n; ++i) {
    const float q = std::clamp(std::nearbyint(x[i] / scale[i] + offset[i]), -128.0f, 127.0f);
    EXPECT_EQ(int8_t(row[i]), int(q)) << i;
    EXPECT_FLOAT_EQ(back[i], (q - offset[i]) * scale[i]) << i;
  }
  EXPECT_EQ(int8_t(row[3]), 127);
  EXPECT_EQ(int8_t(row[20]), -128);
  for (int i = n; i < 32; ++i) EXPECT_EQ(back[i], 0.0f);  // padded to eight
}

TEST(CacheRows, Fp8ScaleAndGainDivideOnStoreMultiplyOnWiden) {
  const int n = 19;  // past the eight-wide loop
  std::vector<float> x(n), scale(n);
  for (int i = 0; i < n; ++i) {
    x[i] = std::sin(float(i)) * 700.0f;
    scale[i] = 0.5f + 0.25f * float(i % 4);
  }
  for (DType t : {DType::F8_E4M3, DType::F8_E5M2}) {
    const CacheRowCodec c{t, scale.data(), nullptr, 2.0f};
    std::vector<uint8_t> row(n);
    store_cache_row(c, x.data(), row.data(), n);
    std::vector<float> back(24);
    widen_cache_row(c, row.data(), back.data(), n);
    for (int i = 0; i < n; ++i) {
      const float y = x[i] / scale[i] / 2.0f;
      const uint8_t code = t == DType::F8_E4M3 ? f32_to_fp8_e4m3(y) : f32_to_fp8_e5m2(y);
      EXPECT_EQ(row[i], code) << i;
      const double v = t == DType::F8_E4M3 ? e4m3_value(code) : e5m2_value(code);
      EXPECT_FLOAT_EQ(back[i], float(v * scale[i] * 2.0)) << i;
    }
  }
}

// This file's decoding of a stored row.
std::vector<float> decode_row(const CacheRowCodec& c, const uint8_t* row, int n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    double v;
    switch (c.dtype) {
      case DType::F8_E4M3:
        v = e4m3_value(row[i]);
        break;
      case DType::F8_E5M2:
        v = e5m2_value(row[i]);
        break;
      case DType::I8:
        v = double(int8_t(row[i])) - (c.offset ? c.offset[i] : 0.0f);
        break;
      default:  // MXFP8: the group's scale byte after the n codes
        v = e4m3_value(row[i]) * std::ldexp(1.0, int(row[n + i / 32]) - 127);
    }
    out[size_t(i)] = float(v * (c.scale ? c.scale[i] : 1.0f) * c.gain);
  }
  return out;
}

struct Pool {
  int64_t blocks;
  std::vector<int32_t> tables, positions, qsl;
  std::vector<int64_t> slots;
};

// Two sequences (a 37-token prefill, a decode at position 52) over shuffled blocks of 8.
Pool make_pool() {
  Pool p;
  p.blocks = 16;
  std::vector<int32_t> perm(size_t(p.blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  p.tables.assign(perm.begin(), perm.begin() + 14);  // 7 blocks each
  p.qsl = {0};
  const int lens[2] = {37, 53}, news[2] = {37, 1};
  for (int s = 0; s < 2; ++s) {
    for (int pos = lens[s] - news[s]; pos < lens[s]; ++pos) {
      p.positions.push_back(pos);
      p.slots.push_back(int64_t(p.tables[size_t(s * 7 + pos / 8)]) * 8 + pos % 8);
    }
    p.qsl.push_back(int32_t(p.positions.size()));
  }
  return p;
}

// The decode's earlier 52 tokens are written too, as one more batch before the step.
void write_history(const KVLayer& layer, const Pool& p, const std::vector<float>& k,
                   const std::vector<float>& v) {
  std::vector<int32_t> pos(52), qsl = {0, 52};
  std::vector<int64_t> slots(52);
  for (int i = 0; i < 52; ++i) {
    pos[size_t(i)] = i;
    slots[size_t(i)] = int64_t(p.tables[size_t(7 + i / 8)]) * 8 + i % 8;
  }
  AttentionBatch b{52, 1, pos.data(), slots.data(), qsl.data(), p.tables.data() + 7, 7};
  write_kv(layer, k.data(), v.data(), b);
}

struct GqaCase {
  DType dtype;
  bool scales, offsets;  // per-channel scales (and C8 offsets)
  // Of the quantized result against the unquantized inputs' attention, as a share of the largest
  // output: what the format's rounding (half an ulp: 2^-4 for E4M3, 2^-3 for E5M2, half a step
  // of 1/127 of the range for int8) leaves after attention averages over ~50 keys.
  double max_rel_err;
};

void check_gqa(const GqaCase& gc) {
  const int nh = 4, kvh = 2, hd = 64;
  const int64_t row = int64_t(kvh) * hd;
  const Pool p = make_pool();
  const int64_t T = int64_t(p.positions.size());
  std::mt19937 rng(11 + int(gc.dtype));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(T * row), v(T * row), hk(52 * row), hv(52 * row), q(T * nh * hd);
  // Unit-variance q, k and v with a 1/sqrt(head_dim) score scale: scores of unit variance, as
  // trained attention has them.
  for (auto* vec : {&k, &v, &hk, &hv, &q})
    for (float& x : *vec) x = nd(rng);
  std::vector<float> ks(row), vs(row), ko(row), vo(row);
  for (int64_t i = 0; i < row; ++i) {
    // C8: the ±4.5σ range over the codes left after the offset, as a calibrated checkpoint has.
    ks[i] = gc.dtype == DType::I8 ? 4.5f / 120.0f * (1.0f + 0.05f * float(i % 7))
                                  : 0.5f + 0.125f * float(i % 5);
    vs[i] = gc.dtype == DType::MXFP8 ? std::exp2(float(i % 3) - 1.0f) : ks[i] * 1.25f;
    ko[i] = float(i % 9) - 4.0f;
    vo[i] = float(i % 4) - 1.5f;
  }
  const size_t rb = dtype_bytes(gc.dtype, hd);
  std::vector<uint8_t> kc(size_t(p.blocks * 8 * kvh) * rb), vc(kc.size());
  KVLayer layer{kc.data(), vc.data(), gc.dtype, p.blocks, 8, kvh, hd};
  if (gc.scales) {
    if (gc.dtype != DType::MXFP8) layer.k_scale = ks.data();
    layer.v_scale = vs.data();
  }
  if (gc.offsets) {
    layer.k_offset = ko.data();
    layer.v_offset = vo.data();
  }
  write_history(layer, p, hk, hv);
  AttentionBatch batch{T, 2, p.positions.data(), p.slots.data(), p.qsl.data(), p.tables.data(), 7};
  write_kv(layer, k.data(), v.data(), batch);

  // An f32 cache of the decoded values, and one of the unquantized values.
  std::vector<float> fk(size_t(p.blocks * 8) * row), fv(fk.size()), uk(fk.size()), uv(fk.size());
  for (int64_t slot = 0; slot < p.blocks * 8; ++slot)
    for (int h = 0; h < kvh; ++h) {
      const int64_t r = kv_row_index(layer, slot, h);
      const std::vector<float> dk = decode_row(key_row_codec(layer, h), kc.data() + r * rb, hd);
      const std::vector<float> dv = decode_row(value_row_codec(layer, h), vc.data() + r * rb, hd);
      std::copy(dk.begin(), dk.end(), fk.begin() + r * hd);
      std::copy(dv.begin(), dv.end(), fv.begin() + r * hd);
    }
  KVLayer decoded{fk.data(), fv.data(), DType::F32, p.blocks, 8, kvh, hd};
  KVLayer plain{uk.data(), uv.data(), DType::F32, p.blocks, 8, kvh, hd};
  write_history(plain, p, hk, hv);
  write_kv(plain, k.data(), v.data(), batch);

  ThreadPool pool(2);
  std::vector<float> out(q.size()), ref(q.size()), exact(q.size());
  const float scale = 1.0f / std::sqrt(float(hd));
  paged_attention(q.data(), layer, batch, nh, scale, out.data(), pool);
  paged_attention(q.data(), decoded, batch, nh, scale, ref.data(), pool);
  paged_attention(q.data(), plain, batch, nh, scale, exact.data(), pool);
  double worst = 0, moved = 0, largest = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << i;
    worst = std::max(worst, double(std::fabs(out[i] - exact[i])));
    moved = std::max(moved, double(std::fabs(ref[i] - exact[i])));
    largest = std::max(largest, double(std::fabs(exact[i])));
  }
  EXPECT_LT(worst / largest, gc.max_rel_err) << dtype_name(gc.dtype);
  EXPECT_GT(moved, 0.0) << "the codes lost nothing: not a quantized cache";
}

TEST(QuantizedKvAttention, Fp8E4M3PerTensorAndPerChannelScales) {
  check_gqa({DType::F8_E4M3, false, false, 0.06});
  check_gqa({DType::F8_E4M3, true, false, 0.06});
}

TEST(QuantizedKvAttention, Fp8E5M2) {
  check_gqa({DType::F8_E5M2, false, false, 0.12});
}

TEST(QuantizedKvAttention, C8Int8WithScalesAndOffsets) {
  check_gqa({DType::I8, true, true, 0.025});
}

TEST(QuantizedKvAttention, Mxfp8DynamicKStaticV) {
  check_gqa({DType::MXFP8, false, false, 0.08});
  check_gqa({DType::MXFP8, true, false, 0.08});
}

// An FP8 latent cache with a per-tensor scale against an f32 cache of its decoded values.
TEST(QuantizedKvAttention, MlaLatentFp8) {
  const int nh = 3, lat = 32, rope = 8, w = lat + rope;
  const Pool p = make_pool();
  const int64_t T = int64_t(p.positions.size());
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> c(T * lat), kr(T * rope), ql(T * nh * lat), qr(T * nh * rope);
  for (auto* vec : {&c, &kr, &ql, &qr})
    for (float& x : *vec) x = nd(rng);
  for (DType t : {DType::F8_E4M3, DType::F8_E5M2}) {
    std::vector<uint8_t> cache(size_t(p.blocks * 8 * w));
    MlaCacheLayer layer{cache.data(), t, p.blocks, 8, lat, rope, 0.03f};
    AttentionBatch batch{T, 2, p.positions.data(), p.slots.data(), p.qsl.data(), p.tables.data(),
                         7};
    write_mla_cache(layer, c.data(), kr.data(), batch);
    std::vector<float> f(cache.size());
    const CacheRowCodec codec{t, nullptr, nullptr, 0.03f};
    for (int64_t slot = 0; slot < p.blocks * 8; ++slot) {
      const std::vector<float> d = decode_row(codec, cache.data() + slot * w, w);
      std::copy(d.begin(), d.end(), f.begin() + slot * w);
    }
    MlaCacheLayer decoded{f.data(), DType::F32, p.blocks, 8, lat, rope};
    ThreadPool pool(2);
    std::vector<float> out(T * nh * lat), ref(out.size());
    mla_attention(ql.data(), qr.data(), layer, batch, nh, 0.2f, out.data(), pool);
    mla_attention(ql.data(), qr.data(), decoded, batch, nh, 0.2f, ref.data(), pool);
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(out[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << dtype_name(t) << " " << i;
  }
}

}  // namespace
}  // namespace kestrel::cpu
