// Backend conformance (backend_conformance_test.cc) of the attention ops: write_kv +
// paged_attention and write_mla_cache + mla_attention over paged caches with shuffled block
// tables, several sequences of different lengths (prefill chunks and decodes in one batch),
// f32/f16/bf16 caches and f32/bf16 activations, on every ISA and on 1 and 2 threads. The cache
// contents are checked against the values written (rotated in float64 where write_kv applies
// rope), the outputs against attention_reference.h's float64 bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_conformance.h"
#include "base/aligned_vector.h"

namespace kestrel::conformance {
namespace {

class BackendConformanceAttention : public ConformanceTest {};

using cpu::test::rounded;

// Sequences whose blocks are spread over a shuffled pool; each has ctx[s] tokens of which the
// last fresh[s] are this step's (written, then attended), the rest history written before.
struct Layout {
  int block_size, max_blocks = 0;
  int64_t num_blocks = 0;
  std::vector<int> ctx, fresh;
  std::vector<int32_t> tables;
  struct Tokens {
    std::vector<int32_t> pos, qsl{0}, seq;
    std::vector<int64_t> slots;
  } history, step;

  Layout(int bs, std::vector<int> ctx_lens, std::vector<int> fresh_lens, std::mt19937& rng)
      : block_size(bs), ctx(std::move(ctx_lens)), fresh(std::move(fresh_lens)) {
    int total = 0;
    for (int L : ctx) {
      max_blocks = std::max(max_blocks, (L + bs - 1) / bs);
      total += (L + bs - 1) / bs;
    }
    std::vector<int32_t> perm(size_t(total) + 3);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    num_blocks = int64_t(perm.size());
    tables.assign(ctx.size() * size_t(max_blocks), -1);
    int next = 0;
    for (size_t s = 0; s < ctx.size(); ++s) {
      for (int b = 0; b < (ctx[s] + bs - 1) / bs; ++b) tables[s * max_blocks + b] = perm[next++];
      for (int p = 0; p < ctx[s]; ++p) {
        Tokens& t = p < ctx[s] - fresh[s] ? history : step;
        t.pos.push_back(p);
        t.seq.push_back(int(s));
        t.slots.push_back(slot_of(int(s), p));
      }
      history.qsl.push_back(int32_t(history.pos.size()));
      step.qsl.push_back(int32_t(step.pos.size()));
    }
  }
  int64_t slot_of(int s, int p) const {
    return int64_t(tables[size_t(s) * max_blocks + p / block_size]) * block_size + p % block_size;
  }
  AttentionBatch batch(const Tokens& t) const {
    AttentionBatch b;
    b.num_tokens = int64_t(t.pos.size());
    b.num_seqs = int(ctx.size());
    b.positions = t.pos.data();
    b.slot_mapping = t.slots.data();
    b.query_start_loc = t.qsl.data();
    b.block_tables = tables.data();
    b.max_blocks_per_seq = max_blocks;
    return b;
  }
};

std::vector<float> widen(DType t, const uint8_t* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::F32) std::memcpy(&out[i], p + 4 * i, 4);
    const uint16_t h = uint16_t(p[2 * i] | (p[2 * i + 1] << 8));
    if (t == DType::F16) out[i] = f16_to_f32(h);
    if (t == DType::BF16) out[i] = bf16_to_f32(h);
  }
  return out;
}

// Outputs against attention_reference.h's float64 bounds under the specified rounding (cache
// dtype `cache`, activations `act`): every output inside its interval, and every interval
// narrow against its row's scale, so that the check has teeth.
class BoundsCheck {
 public:
  BoundsCheck(DType cache, DType act)
      : rounding_(cpu::test::specified_rounding(cache, act)),
        max_width_(cache == DType::F32 && act == DType::F32 ? 0x1p-10 : 0x1p-6) {}
  void row(const float* q, int d, const std::vector<const float*>& keys,
           const std::vector<const float*>& values, int dv, float scale, const float* out,
           const std::string& where) {
    const std::vector<Interval> b =
        cpu::test::attention_bounds(q, d, keys, values, dv, scale, rounding_);
    double row_scale = 1e-30;
    for (const Interval& v : b) row_scale = std::max({row_scale, std::fabs(v.lo), std::fabs(v.hi)});
    for (int i = 0; i < dv; ++i) {
      ++checked_;
      worst_width_ = std::max(worst_width_, (b[i].hi - b[i].lo) / row_scale);
      if (!b[i].contains(out[i]) && outside_++ < 5)
        ADD_FAILURE() << where << " dim " << i << ": " << out[i] << " not in [" << b[i].lo << ", "
                      << b[i].hi << "]";
    }
  }
  void finish() const {
    EXPECT_EQ(outside_, 0) << "of " << checked_ << " outputs";
    EXPECT_LT(worst_width_, max_width_) << "bounds too wide to check much";
  }

 private:
  cpu::test::AttentionRounding rounding_;
  // All f32: 1/1024 of the row's scale; probabilities or outputs in bf16/f16: about two ulps.
  double max_width_;
  int64_t checked_ = 0, outside_ = 0;
  double worst_width_ = 0;
};

size_t elem_bytes(DType t) {
  return t == DType::F32 ? 4 : 2;
}

struct PagedCase {
  int heads, kv_heads, head_dim, block_size;
  std::vector<int> ctx, fresh;
  DType cache, act;
  int rot_dim;  // write_kv rotates K: 0 = no rope
  bool interleaved;
};

TEST_F(BackendConformanceAttention, WriteKvAndPagedAttention) {
  const PagedCase cases[] = {
      {6, 2, 24, 16, {77, 33, 5, 130}, {9, 1, 5, 3}, DType::F32, DType::F32, 0, false},
      {6, 2, 24, 16, {77, 33, 5, 130}, {9, 1, 5, 3}, DType::F32, DType::F32, 16, false},
      {4, 4, 37, 5, {40, 13}, {2, 13}, DType::BF16, DType::F32, 0, false},
      {8, 1, 64, 16, {70, 3}, {1, 3}, DType::F16, DType::F32, 64, true},
      {6, 3, 32, 16, {50, 21}, {7, 1}, DType::BF16, DType::BF16, 0, false},
  };
  for (const PagedCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.heads << "/" << c.kv_heads << " heads, head_dim " << c.head_dim << ", cache "
                 << dtype_name(c.cache) << ", act " << dtype_name(c.act) << ", rot " << c.rot_dim);
    std::mt19937 rng(uint32_t(c.head_dim * 31 + c.rot_dim));
    const Layout lay(c.block_size, c.ctx, c.fresh, rng);
    const int hd = c.head_dim, nh = c.heads, group = c.heads / c.kv_heads;
    const int64_t row = int64_t(c.kv_heads) * hd;
    const int64_t nh_ = lay.history.pos.size(), ns = lay.step.pos.size();
    const std::vector<float> kh = randn(size_t(nh_ * row), rng), vh = randn(kh.size(), rng);
    const std::vector<float> ks = randn(size_t(ns * row), rng), vs = randn(ks.size(), rng);
    std::vector<float> q = randn(size_t(ns * nh * hd), rng);
    for (float& x : q) x = rounded(c.act, x);
    std::vector<float> inv(static_cast<size_t>(c.rot_dim / 2));
    for (int i = 0; i < c.rot_dim / 2; ++i)
      inv[i] = float(std::pow(10000.0, -2.0 * i / std::max(c.rot_dim, 1)));
    RopeParams rope;
    rope.inv_freq = inv.data();
    rope.rot_dim = c.rot_dim;
    rope.interleaved = c.interleaved;
    const RopeParams* rope_k = c.rot_dim > 0 ? &rope : nullptr;
    const float scale = 1.0f / std::sqrt(float(hd));
    const size_t cache_bytes = size_t(lay.num_blocks * c.block_size * row) * elem_bytes(c.cache);
    // The cache's shape (the data pointers are not read by kv_row_index).
    KVLayer shape;
    shape.num_blocks = lay.num_blocks;
    shape.block_size = c.block_size;
    shape.num_kv_heads = c.kv_heads;
    shape.head_dim = hd;
    // Where slot `slot`, head g starts in the cache, in bytes.
    auto at_of = [&](int64_t slot, int g) {
      return size_t(kv_row_index(shape, slot, g) * hd) * elem_bytes(c.cache);
    };

    for_each_isa([&](const std::string&) {
      std::vector<AlignedVector<uint8_t>> kc, vc;
      std::vector<std::vector<float>> outs;
      for (Backend* b : {one.get(), two.get()}) {
        // Unwritten rows hold NaN (all-ones bits in every dtype): reading one would show.
        kc.emplace_back(cache_bytes, uint8_t(0xFF));
        vc.emplace_back(cache_bytes, uint8_t(0xFF));
        KVLayer layer;
        layer.k = kc.back().data();
        layer.v = vc.back().data();
        layer.dtype = c.cache;
        layer.num_blocks = lay.num_blocks;
        layer.block_size = c.block_size;
        layer.num_kv_heads = c.kv_heads;
        layer.head_dim = hd;
        b->write_kv(layer, kh.data(), vh.data(), lay.batch(lay.history), rope_k);
        b->write_kv(layer, ks.data(), vs.data(), lay.batch(lay.step), rope_k);
        outs.emplace_back(q.size(), std::numeric_limits<float>::quiet_NaN());
        b->paged_attention(q.data(), layer, lay.batch(lay.step), nh, scale, outs.back().data(),
                           c.act);
      }
      EXPECT_TRUE(same_bits(kc[0], kc[1]));
      EXPECT_TRUE(same_bits(vc[0], vc[1]));
      EXPECT_TRUE(same_bits(outs[0], outs[1]));

      // The cache: K (rotated by the exact angle, within the f32 rope's error) and V, each
      // rounded to the cache dtype.
      int bad = 0;
      for (const Layout::Tokens* tk : {&lay.history, &lay.step}) {
        const std::vector<float>& k = tk == &lay.history ? kh : ks;
        const std::vector<float>& v = tk == &lay.history ? vh : vs;
        for (size_t t = 0; t < tk->pos.size(); ++t) {
          std::vector<float> kr, vr;
          for (int g = 0; g < c.kv_heads; ++g) {
            const std::vector<float> kg = widen(c.cache, kc[1].data() + at_of(tk->slots[t], g), hd);
            const std::vector<float> vg = widen(c.cache, vc[1].data() + at_of(tk->slots[t], g), hd);
            kr.insert(kr.end(), kg.begin(), kg.end());
            vr.insert(vr.end(), vg.begin(), vg.end());
          }
          for (int64_t i = 0; i < row; ++i) {
            const int d = int(i % hd), half = c.rot_dim / 2;
            Interval want{rounded(c.cache, k[t * row + i]), rounded(c.cache, k[t * row + i])};
            if (d < c.rot_dim) {
              const int pair = c.interleaved ? d / 2 : d % half;
              const bool first = c.interleaved ? d % 2 == 0 : d < half;
              const int64_t ia = i - d + (c.interleaved ? 2 * pair : pair);
              const int64_t ib = i - d + (c.interleaved ? 2 * pair + 1 : pair + half);
              const double a = k[t * row + ia], bb = k[t * row + ib];
              const double th = double(tk->pos[t]) * inv[pair];
              const double val = first ? a * std::cos(th) - bb * std::sin(th)
                                       : bb * std::cos(th) + a * std::sin(th);
              const double e = (std::fabs(a) + std::fabs(bb)) * (std::fabs(th) + 8) * kU;
              want = rounded_interval(c.cache, val - e, val + e);
            }
            const bool ok = want.contains(kr[i]) && vr[i] == rounded(c.cache, v[t * row + i]);
            if (!ok && bad++ < 3)
              ADD_FAILURE() << "cache pos " << tk->pos[t] << " elem " << i << ": K " << kr[i]
                            << " in [" << want.lo << ", " << want.hi << "], V " << vr[i] << " want "
                            << v[t * row + i];
          }
        }
      }
      EXPECT_EQ(bad, 0);

      // The outputs, against keys and values as stored.
      BoundsCheck check(c.cache, c.act);
      for (int64_t t = 0; t < ns; ++t) {
        const int s = lay.step.seq[t], pos = lay.step.pos[t];
        for (int h = 0; h < nh; ++h) {
          const int g = h / group;
          std::vector<std::vector<float>> kr, vr;
          std::vector<const float*> keys, values;
          for (int j = 0; j <= pos; ++j) {
            const size_t at = at_of(lay.slot_of(s, j), g);
            kr.push_back(widen(c.cache, kc[1].data() + at, hd));
            vr.push_back(widen(c.cache, vc[1].data() + at, hd));
          }
          for (int j = 0; j <= pos; ++j) {
            keys.push_back(kr[j].data());
            values.push_back(vr[j].data());
          }
          check.row(q.data() + (t * nh + h) * hd, hd, keys, values, hd, scale,
                    outs[1].data() + (t * nh + h) * hd,
                    "token " + std::to_string(t) + " head " + std::to_string(h));
        }
      }
      check.finish();
    });
  }
}

struct MlaCase {
  int heads, latent, rope, block_size;
  std::vector<int> ctx, fresh;
  DType cache, act;
};

TEST_F(BackendConformanceAttention, WriteMlaCacheAndMlaAttention) {
  const MlaCase cases[] = {
      {5, 64, 16, 16, {77, 33, 5}, {9, 1, 5}, DType::F32, DType::F32},  // read in place
      {16, 37, 11, 5, {40, 13}, {2, 13}, DType::F32, DType::F32},       // odd widths
      {5, 64, 16, 16, {50, 21}, {7, 1}, DType::BF16, DType::F32},
      {8, 32, 8, 16, {50, 21}, {7, 1}, DType::BF16, DType::BF16},
      {4, 48, 8, 16, {30}, {30}, DType::F16, DType::F32},
  };
  for (const MlaCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.heads << " heads, latent " << c.latent << ", rope " << c.rope << ", cache "
                 << dtype_name(c.cache) << ", act " << dtype_name(c.act));
    std::mt19937 rng(uint32_t(c.latent * 7 + c.rope));
    const Layout lay(c.block_size, c.ctx, c.fresh, rng);
    const int L = c.latent, R = c.rope, nh = c.heads;
    const int64_t nh_ = lay.history.pos.size(), ns = lay.step.pos.size(), width = L + R;
    const std::vector<float> ch = randn(size_t(nh_ * L), rng), kh = randn(size_t(nh_ * R), rng);
    const std::vector<float> cs = randn(size_t(ns * L), rng), ks = randn(size_t(ns * R), rng);
    std::vector<float> ql = randn(size_t(ns * nh * L), rng), qr = randn(size_t(ns * nh * R), rng);
    for (float& x : ql) x = rounded(c.act, x);
    for (float& x : qr) x = rounded(c.act, x);
    const float scale = 1.0f / std::sqrt(float(width));
    const size_t es = elem_bytes(c.cache);
    const size_t cache_bytes = size_t(lay.num_blocks * c.block_size * width) * es;

    for_each_isa([&](const std::string&) {
      std::vector<AlignedVector<uint8_t>> store;
      std::vector<std::vector<float>> outs;
      for (Backend* b : {one.get(), two.get()}) {
        store.emplace_back(cache_bytes, uint8_t(0xFF));
        MlaCacheLayer cache;
        cache.data = store.back().data();
        cache.dtype = c.cache;
        cache.num_blocks = lay.num_blocks;
        cache.block_size = c.block_size;
        cache.latent_dim = L;
        cache.rope_dim = R;
        b->write_mla_cache(cache, ch.data(), kh.data(), lay.batch(lay.history));
        b->write_mla_cache(cache, cs.data(), ks.data(), lay.batch(lay.step));
        outs.emplace_back(ql.size(), std::numeric_limits<float>::quiet_NaN());
        b->mla_attention(ql.data(), qr.data(), cache, lay.batch(lay.step), nh, scale,
                         outs.back().data(), c.act);
      }
      EXPECT_TRUE(same_bits(store[0], store[1]));
      EXPECT_TRUE(same_bits(outs[0], outs[1]));

      // The cache rows [c | kpe], each value rounded to the cache dtype.
      int bad = 0;
      for (const Layout::Tokens* tk : {&lay.history, &lay.step}) {
        const bool hist = tk == &lay.history;
        for (size_t t = 0; t < tk->pos.size(); ++t) {
          const std::vector<float> got =
              widen(c.cache, store[1].data() + tk->slots[t] * width * es, width);
          for (int64_t i = 0; i < width; ++i) {
            const float x = i < L ? (hist ? ch : cs)[t * L + i] : (hist ? kh : ks)[t * R + i - L];
            if (got[i] != rounded(c.cache, x) && bad++ < 3)
              ADD_FAILURE() << "cache pos " << tk->pos[t] << " elem " << i << ": " << got[i]
                            << " want " << rounded(c.cache, x);
          }
        }
      }
      EXPECT_EQ(bad, 0);

      // MQA over keys [c | kpe] and values c as stored, queries [q_lat | q_rope].
      BoundsCheck check(c.cache, c.act);
      for (int64_t t = 0; t < ns; ++t) {
        const int s = lay.step.seq[t], pos = lay.step.pos[t];
        std::vector<std::vector<float>> rows;
        std::vector<const float*> keys;
        for (int j = 0; j <= pos; ++j)
          rows.push_back(widen(c.cache, store[1].data() + lay.slot_of(s, j) * width * es, width));
        for (int j = 0; j <= pos; ++j) keys.push_back(rows[j].data());
        for (int h = 0; h < nh; ++h) {
          std::vector<float> qcat(ql.begin() + (t * nh + h) * L, ql.begin() + (t * nh + h + 1) * L);
          qcat.insert(qcat.end(), qr.begin() + (t * nh + h) * R, qr.begin() + (t * nh + h + 1) * R);
          check.row(qcat.data(), int(width), keys, keys, L, scale,
                    outs[1].data() + (t * nh + h) * L,
                    "token " + std::to_string(t) + " head " + std::to_string(h));
        }
      }
      check.finish();
    });
  }
}

}  // namespace
}  // namespace kestrel::conformance
