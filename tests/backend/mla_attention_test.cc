// MLA over a paged latent cache against float64 references: the absorbed form itself (several
// sequences, scattered block tables, prefill chunks and decodes, f32/f16/bf16 caches), the
// rounding of bf16 caches and activations, batch invariance, and the equivalence with the
// expanded per-head attention HF computes.
#include "backend/cpu/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/attention_reference.h"
#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

// What the kernel sees of a value stored in (or rounded to) dtype t.
double rounded(DType t, float x) {
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

size_t elem_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}

// Sequences with their whole context (latent c and roped key per position) in a paged cache
// whose blocks are shuffled across the pool; the last `fresh[s]` positions of each sequence
// are this step's query tokens, written through write_mla_cache as a model step would. `extra`
// values (DeepSeek-V3.2's indexer key, NaN here) end every row.
struct LatentCache {
  int latent, rope, block_size, max_blocks = 0;
  std::vector<int> ctx, fresh;
  std::vector<std::vector<float>> c, kpe;  // [s][pos · latent], [s][pos · rope]
  std::vector<int32_t> tables, positions, qsl{0};
  std::vector<int64_t> slots;
  std::vector<uint8_t> storage;
  MlaCacheLayer cache;

  LatentCache(DType dtype, int latent_dim, int rope_dim, int bs, std::vector<int> ctx_lens,
              std::vector<int> new_lens, std::mt19937& rng, int extra = 0)
      : latent(latent_dim),
        rope(rope_dim),
        block_size(bs),
        ctx(std::move(ctx_lens)),
        fresh(std::move(new_lens)) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int S = int(ctx.size());
    int total = 0;
    for (int L : ctx) {
      max_blocks = std::max(max_blocks, (L + bs - 1) / bs);
      total += (L + bs - 1) / bs;
    }
    std::vector<int32_t> perm(size_t(total) + 3);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(size_t(S * max_blocks), -1);
    int next = 0;
    for (int s = 0; s < S; ++s)
      for (int b = 0; b < (ctx[s] + bs - 1) / bs; ++b) tables[s * max_blocks + b] = perm[next++];
    const int64_t nblocks = int64_t(perm.size());
    // Unused rows hold NaN (all-ones bits in every dtype): reading one would show.
    storage.assign(size_t(nblocks * bs * (latent + rope + extra)) * elem_size(dtype), 0xFF);
    cache = {storage.data(), dtype, nblocks, bs, latent, rope};
    cache.index_dim = extra;

    std::vector<int32_t> old_pos;
    std::vector<int64_t> old_slots;
    std::vector<float> old_c, old_k, new_c, new_k;
    c.resize(S);
    kpe.resize(S);
    for (int s = 0; s < S; ++s) {
      for (int p = 0; p < ctx[s]; ++p) {
        const int64_t slot = slot_of(s, p);
        const bool is_new = p >= ctx[s] - fresh[s];
        for (int i = 0; i < latent; ++i) c[s].push_back(nd(rng));
        for (int i = 0; i < rope; ++i) kpe[s].push_back(nd(rng));
        auto& dc = is_new ? new_c : old_c;
        auto& dk = is_new ? new_k : old_k;
        dc.insert(dc.end(), c[s].end() - latent, c[s].end());
        dk.insert(dk.end(), kpe[s].end() - rope, kpe[s].end());
        (is_new ? positions : old_pos).push_back(p);
        (is_new ? slots : old_slots).push_back(slot);
      }
      qsl.push_back(qsl.back() + fresh[s]);
    }
    const AttentionBatch history{
        int64_t(old_pos.size()), 0, old_pos.data(), old_slots.data(), nullptr, nullptr, 0};
    write_mla_cache(cache, old_c.data(), old_k.data(), history);
    write_mla_cache(cache, new_c.data(), new_k.data(), batch());
  }

  int64_t slot_of(int s, int p) const {
    return int64_t(tables[s * max_blocks + p / block_size]) * block_size + p % block_size;
  }
  AttentionBatch batch() const {
    return {int64_t(positions.size()),
            int(ctx.size()),
            positions.data(),
            slots.data(),
            qsl.data(),
            tables.data(),
            max_blocks};
  }
  int seq_of(int64_t t) const {
    return int(std::upper_bound(qsl.begin(), qsl.end(), int32_t(t)) - qsl.begin()) - 1;
  }
};

// The absorbed-form attention of one query row in float64 over operands as the kernel sees
// them: q, c, kpe (and the probabilities, for P·C) rounded to the cache dtype `op`; with
// `picks`, over those keys only.
std::vector<double> reference_row(const LatentCache& st, int s, int pos, const float* ql,
                                  const float* qr, double scale, DType op,
                                  const std::vector<int32_t>* picks = nullptr) {
  std::vector<double> sc(size_t(pos) + 1);
  double mx = -1e300;
  for (int j = 0; j <= pos; ++j) {
    if (picks != nullptr && std::find(picks->begin(), picks->end(), j) == picks->end()) {
      sc[j] = -INFINITY;
      continue;
    }
    double d = 0;
    for (int i = 0; i < st.latent; ++i)
      d += rounded(op, ql[i]) * rounded(op, st.c[s][size_t(j) * st.latent + i]);
    for (int i = 0; i < st.rope; ++i)
      d += rounded(op, qr[i]) * rounded(op, st.kpe[s][size_t(j) * st.rope + i]);
    sc[j] = d * scale;
    mx = std::max(mx, sc[j]);
  }
  double sum = 0;
  for (double& v : sc) sum += (v = std::exp(v - mx));
  std::vector<double> out(size_t(st.latent), 0.0);
  for (int j = 0; j <= pos; ++j) {
    const double pj = rounded(op, float(sc[j] / sum));
    for (int i = 0; i < st.latent; ++i)
      out[i] += pj * rounded(op, st.c[s][size_t(j) * st.latent + i]);
  }
  return out;
}

struct Shape {
  int heads, latent, rope, block_size;
  std::vector<int> ctx, fresh;
};

void check_against_reference(const Shape& sh, DType dtype, int threads, double tol) {
  std::mt19937 rng(321 + sh.latent + int(dtype));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  LatentCache st(dtype, sh.latent, sh.rope, sh.block_size, sh.ctx, sh.fresh, rng);
  const int64_t T = int64_t(st.positions.size());
  const int nh = sh.heads;
  std::vector<float> ql(size_t(T * nh * sh.latent)), qr(size_t(T * nh * sh.rope));
  for (float& x : ql) x = nd(rng);
  for (float& x : qr) x = nd(rng);
  std::vector<float> out(ql.size(), std::nanf(""));
  const float scale = 1.0f / std::sqrt(float(sh.latent / 4 + sh.rope));
  ThreadPool pool(threads);
  const AttentionBatch batch = st.batch();
  mla_attention(ql.data(), qr.data(), st.cache, batch, nh, scale, out.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    const int s = st.seq_of(t);
    for (int h = 0; h < nh; ++h) {
      const int64_t row = t * nh + h;
      const auto ref = reference_row(st, s, st.positions[t], ql.data() + row * sh.latent,
                                     qr.data() + row * sh.rope, scale, dtype);
      for (int i = 0; i < sh.latent; ++i)
        ASSERT_NEAR(out[row * sh.latent + i], ref[i], tol * (1 + std::fabs(ref[i])))
            << "seq " << s << " token " << t << " head " << h << " dim " << i;
    }
  }
}

// Prefill chunks starting mid-sequence (5 of 40, 9 of 17, 12 of 70), whole prompts (5 of 5)
// and decodes (1 of 1, 1 of 33), their blocks interleaved across the pool.
const Shape kMixed{6, 64, 16, 16, {5, 33, 17, 1, 70, 40}, {5, 1, 9, 1, 12, 5}};

TEST(MlaAttention, MatchesReferenceF32Cache) {
  check_against_reference(kMixed, DType::F32, 2, 2e-6);
}

TEST(MlaAttention, MatchesReferenceF16Cache) {
  check_against_reference(kMixed, DType::F16, 3, 3e-5);
}

TEST(MlaAttention, MatchesReferenceBf16Cache) {
  check_against_reference(kMixed, DType::BF16, 2, 2e-5);
}

// Widths that are not multiples of 8 (the f32 cache is widened and padded), an odd head
// count (kernel remainders), and blocks smaller than a key block.
TEST(MlaAttention, OddWidthsSmallBlocksOddHeads) {
  check_against_reference({5, 20, 6, 4, {13, 2, 31}, {13, 2, 3}}, DType::F32, 3, 2e-6);
  check_against_reference({7, 36, 0, 8, {19, 9}, {4, 9}}, DType::BF16, 1, 2e-5);
}

// Many heads with a single decode token: the heads are split across units.
TEST(MlaAttention, ManyHeadsDecodeSplitsHeads) {
  check_against_reference({40, 32, 8, 16, {50}, {1}}, DType::F32, 4, 2e-6);
}

// DeepSeek-V3.2's sparse form: each token attends only to the keys in
// AttentionBatch::selected_keys, in rows that end with indexer keys. Tokens with more keys than
// picks keep a random subset; the others keep every key (and -1 padding).
void check_sparse(DType dtype, int threads, double tol) {
  std::mt19937 rng(77 + int(dtype));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const Shape& sh = kMixed;
  LatentCache st(dtype, sh.latent, sh.rope, sh.block_size, sh.ctx, sh.fresh, rng, 24);
  const int64_t T = int64_t(st.positions.size());
  const int nh = sh.heads, k = 6;
  std::vector<float> ql(size_t(T * nh * sh.latent)), qr(size_t(T * nh * sh.rope));
  for (float& x : ql) x = nd(rng);
  for (float& x : qr) x = nd(rng);
  std::vector<int32_t> picks(size_t(T * k), -1);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> all(size_t(st.positions[t]) + 1);
    std::iota(all.begin(), all.end(), 0);
    if (int(all.size()) > k) std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), std::min<size_t>(k, all.size()), picks.begin() + t * k);
  }
  const float scale = 1.0f / std::sqrt(float(sh.latent / 4 + sh.rope));
  ThreadPool pool(threads);
  AttentionBatch batch = st.batch();
  batch.selected_keys = picks.data();
  batch.keys_per_token = k;
  std::vector<float> out(ql.size(), std::nanf(""));
  mla_attention(ql.data(), qr.data(), st.cache, batch, nh, scale, out.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    const int s = st.seq_of(t);
    const std::vector<int32_t> mine(picks.begin() + t * k, picks.begin() + (t + 1) * k);
    for (int h = 0; h < nh; ++h) {
      const int64_t row = t * nh + h;
      const auto ref = reference_row(st, s, st.positions[t], ql.data() + row * sh.latent,
                                     qr.data() + row * sh.rope, scale, dtype, &mine);
      for (int i = 0; i < sh.latent; ++i)
        ASSERT_NEAR(out[row * sh.latent + i], ref[i], tol * (1 + std::fabs(ref[i])))
            << "token " << t << " head " << h << " dim " << i;
    }
  }
  // Picking every key (in any order) is dense attention, bit for bit.
  const int wide = 80;
  std::vector<int32_t> every(size_t(T * wide), -1);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j <= st.positions[t]; ++j) every[t * wide + (st.positions[t] - j)] = j;
  batch.selected_keys = every.data();
  batch.keys_per_token = wide;
  std::vector<float> all_picked(ql.size()), dense(ql.size());
  mla_attention(ql.data(), qr.data(), st.cache, batch, nh, scale, all_picked.data(), pool);
  mla_attention(ql.data(), qr.data(), st.cache, st.batch(), nh, scale, dense.data(), pool);
  EXPECT_EQ(all_picked, dense);
}

TEST(MlaAttention, SparseSelectionF32Cache) {
  check_sparse(DType::F32, 2, 2e-6);
}

TEST(MlaAttention, SparseSelectionBf16Cache) {
  check_sparse(DType::BF16, 3, 2e-5);
}

TEST(MlaAttention, WriteStoresRoundedBits) {
  std::mt19937 rng(8);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    LatentCache st(dt, 12, 4, 4, {9, 3}, {4, 3}, rng);
    for (int s = 0; s < 2; ++s)
      for (int p = 0; p < st.ctx[s]; ++p) {
        const uint8_t* row =
            st.storage.data() + size_t(st.slot_of(s, p) * (12 + 4)) * elem_size(dt);
        for (int i = 0; i < 16; ++i) {
          const float v = i < 12 ? st.c[s][p * 12 + i] : st.kpe[s][p * 4 + i - 12];
          uint32_t got = 0, want = 0;
          std::memcpy(&got, row + i * elem_size(dt), elem_size(dt));
          if (dt == DType::F32) want = f32_to_bits(v);
          if (dt == DType::F16) want = f32_to_f16(v);
          if (dt == DType::BF16) want = f32_to_bf16(v);
          ASSERT_EQ(got, want) << dtype_name(dt) << " seq " << s << " pos " << p << " " << i;
        }
      }
  }
}

// Against the float64 reference that rounds where mla_attention.h says (cache `dtype`,
// activations `act`; q as a model in `act` gives it): every output within the bounds the
// remaining f32 arithmetic allows, bounds tight enough that dropping any step of `dropped` would
// show (test::RoundingCheck).
void check_rounding(DType dtype, DType act, const std::vector<test::AttentionRounding>& dropped) {
  std::mt19937 rng(42 + int(dtype) * 7 + int(act));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int nh = 5, L = 32, R = 8;
  LatentCache st(dtype, L, R, 16, {37, 10}, {37, 1}, rng);
  const int64_t T = int64_t(st.positions.size());
  std::vector<float> ql(size_t(T * nh * L)), qr(size_t(T * nh * R)), out(ql.size());
  for (float& x : ql) x = test::rounded(act, nd(rng));
  for (float& x : qr) x = test::rounded(act, nd(rng));
  const float scale = 0.2f;
  ThreadPool pool(2);
  mla_attention(ql.data(), qr.data(), st.cache, st.batch(), nh, scale, out.data(), pool, act);
  test::RoundingCheck check(test::specified_rounding(dtype, act), dropped);
  for (int64_t t = 0; t < T; ++t) {
    const int s = st.seq_of(t), pos = st.positions[t];
    // Each key [c | kpe] and value c as the kernel reads them from the cache.
    std::vector<std::vector<float>> key_rows(size_t(pos) + 1), value_rows(size_t(pos) + 1);
    std::vector<const float*> keys, values;
    for (int j = 0; j <= pos; ++j) {
      for (int i = 0; i < L; ++i) key_rows[j].push_back(test::rounded(dtype, st.c[s][j * L + i]));
      value_rows[j] = key_rows[j];
      for (int i = 0; i < R; ++i) key_rows[j].push_back(test::rounded(dtype, st.kpe[s][j * R + i]));
      keys.push_back(key_rows[j].data());
      values.push_back(value_rows[j].data());
    }
    for (int h = 0; h < nh; ++h) {
      const int64_t row = t * nh + h;
      std::vector<float> q(ql.begin() + row * L, ql.begin() + (row + 1) * L);
      q.insert(q.end(), qr.begin() + row * R, qr.begin() + (row + 1) * R);
      check.row(q.data(), L + R, keys, values, L, scale, &out[row * L],
                "token " + std::to_string(t) + " head " + std::to_string(h));
    }
  }
  check.finish();
}

TEST(MlaAttention, Bf16ActivationsRoundWhereSpecified) {
  const test::AttentionRounding spec = test::specified_rounding(DType::F32, DType::BF16);
  test::AttentionRounding unrounded_probs = spec, unrounded_scores = spec;
  unrounded_probs.probs = DType::F32;
  unrounded_scores.scores = DType::F32;
  check_rounding(DType::F32, DType::BF16, {unrounded_probs, unrounded_scores});
}

TEST(MlaAttention, Bf16CacheRoundsTheOperands) {
  const test::AttentionRounding spec = test::specified_rounding(DType::BF16, DType::F32);
  test::AttentionRounding unrounded_q = spec, unrounded_probs = spec;
  unrounded_q.q = DType::F32;
  unrounded_probs.probs = DType::F32;
  check_rounding(DType::BF16, DType::F32, {unrounded_q, unrounded_probs});
}

TEST(MlaAttention, Bf16CacheAndActivationsRoundWhereSpecified) {
  const test::AttentionRounding spec = test::specified_rounding(DType::BF16, DType::BF16);
  test::AttentionRounding unrounded_probs = spec, unrounded_scores = spec;
  unrounded_probs.probs = DType::F32;
  unrounded_scores.scores = DType::F32;
  check_rounding(DType::BF16, DType::BF16, {unrounded_probs, unrounded_scores});
}

// A token's output is bit-identical whether computed in a batch (prefill tiles, another
// sequence, several threads, head tiles chosen for that batch) or alone as a decode step on
// one thread (different head tiles).
void check_batch_invariance(DType dtype, DType act, int threads) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int nh = 13, L = 40, R = 8;
  LatentCache st(dtype, L, R, 16, {45, 20}, {45, 6}, rng);
  const int64_t T = int64_t(st.positions.size());
  std::vector<float> ql(size_t(T * nh * L)), qr(size_t(T * nh * R)), batched(ql.size());
  for (float& x : ql) x = nd(rng);
  for (float& x : qr) x = nd(rng);
  ThreadPool pool(threads), one(1);
  mla_attention(ql.data(), qr.data(), st.cache, st.batch(), nh, 0.2f, batched.data(), pool, act);
  for (int64_t t = 0; t < T; ++t) {
    const int s = st.seq_of(t);
    const int32_t qsl[2] = {0, 1};
    const AttentionBatch alone{1,
                               1,
                               &st.positions[t],
                               &st.slots[t],
                               qsl,
                               st.tables.data() + s * st.max_blocks,
                               st.max_blocks};
    std::vector<float> out(size_t(nh * L));
    mla_attention(ql.data() + t * nh * L, qr.data() + t * nh * R, st.cache, alone, nh, 0.2f,
                  out.data(), one, act);
    for (int i = 0; i < nh * L; ++i)
      ASSERT_EQ(f32_to_bits(out[i]), f32_to_bits(batched[t * nh * L + i]))
          << "token " << t << " element " << i;
  }
}

TEST(MlaAttention, BatchInvariantF32) {
  check_batch_invariance(DType::F32, DType::F32, 2);
}
TEST(MlaAttention, BatchInvariantF16Cache) {
  check_batch_invariance(DType::F16, DType::F32, 3);
}
TEST(MlaAttention, BatchInvariantBf16CacheAndActivations) {
  check_batch_invariance(DType::BF16, DType::BF16, 2);
}

// The absorbed form equals the expanded one (models.md §4.3 vs §4.5): with per-head
// W_UK [dn, r] and W_UV [dv, r], attention over keys [W_UK·c | kpe] and values W_UV·c (float64)
// matches W_UV · mla_attention(q_lat = W_UKᵀ·q_nope) with the same scale.
TEST(MlaAttention, AbsorbedFormEqualsExpandedAttention) {
  const int nh = 4, dn = 16, dv = 12, r = 48, dr = 8, bs = 8;
  const double scale = 1.0 / std::sqrt(double(dn + dr)) * 1.87;
  std::mt19937 rng(2024);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  LatentCache st(DType::F32, r, dr, bs, {29, 11}, {7, 1}, rng);
  // Weights scaled so k_nope and v are about unit size, as a trained kv_b_proj gives.
  std::vector<double> wuk(size_t(nh * dn * r)), wuv(size_t(nh * dv * r));
  for (double& w : wuk) w = nd(rng) / std::sqrt(double(r));
  for (double& w : wuv) w = nd(rng) / std::sqrt(double(r));
  const int64_t T = int64_t(st.positions.size());
  std::vector<float> q_nope(size_t(T * nh * dn)), q_rope(size_t(T * nh * dr));
  for (float& x : q_nope) x = nd(rng);
  for (float& x : q_rope) x = nd(rng);

  std::vector<float> q_lat(size_t(T * nh * r)), lat_out(q_lat.size());
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < r; ++i) {
        double acc = 0;
        for (int d = 0; d < dn; ++d)
          acc += wuk[(h * dn + d) * r + i] * q_nope[(t * nh + h) * dn + d];
        q_lat[(t * nh + h) * r + i] = float(acc);
      }
  ThreadPool pool(2);
  mla_attention(q_lat.data(), q_rope.data(), st.cache, st.batch(), nh, float(scale), lat_out.data(),
                pool);

  for (int64_t t = 0; t < T; ++t) {
    const int s = st.seq_of(t), pos = st.positions[t];
    for (int h = 0; h < nh; ++h) {
      // Expanded: per-key k_nope = W_UK·c, v = W_UV·c.
      std::vector<double> sc(size_t(pos) + 1), v(size_t(pos + 1) * dv);
      double mx = -1e300;
      for (int j = 0; j <= pos; ++j) {
        const float* cj = st.c[s].data() + size_t(j) * r;
        double d = 0;
        for (int a = 0; a < dn; ++a) {
          double k = 0;
          for (int i = 0; i < r; ++i) k += wuk[(h * dn + a) * r + i] * cj[i];
          d += double(q_nope[(t * nh + h) * dn + a]) * k;
        }
        for (int a = 0; a < dr; ++a)
          d += double(q_rope[(t * nh + h) * dr + a]) * st.kpe[s][size_t(j) * dr + a];
        for (int a = 0; a < dv; ++a) {
          double x = 0;
          for (int i = 0; i < r; ++i) x += wuv[(h * dv + a) * r + i] * cj[i];
          v[size_t(j) * dv + a] = x;
        }
        sc[j] = d * scale;
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int a = 0; a < dv; ++a) {
        double expanded = 0, absorbed = 0;
        for (int j = 0; j <= pos; ++j) expanded += sc[j] / sum * v[size_t(j) * dv + a];
        for (int i = 0; i < r; ++i)
          absorbed += wuv[(h * dv + a) * r + i] * lat_out[(t * nh + h) * r + i];
        ASSERT_NEAR(absorbed, expanded, 5e-6 * (1 + std::fabs(expanded)))
            << "token " << t << " head " << h << " dim " << a;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu
