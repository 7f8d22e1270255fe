#include "backend/cpu/mla_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/aligned_scratch.h"
#include "backend/cpu/attention_rows.h"
#include "backend/cpu/simd_math.h"
#include "base/fp16.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

// Tokens of one sequence in a unit (a prefill tile); they share every cache row read.
constexpr int kQueryTile = 8;
// Cache rows loaded (and widened) together; every query row of the unit uses each of them.
constexpr int kKeyBlock = 16;
// Keys scored together: with a pair of q rows they stay in L1 while every head pair runs.
constexpr int kScoreBlock = 8;
// Score kernel: two query rows against four keys, eight dot products in one reduction.
constexpr int kScoreRows = 2;
constexpr int kScoreKeys = 4;
// P·C kernel: four heads × three vectors of the latent in registers.
constexpr int kPvRows = 4;
constexpr int kPvVecs = 3;
// At most this many query rows (token × head) per unit: bounds the per-thread score buffer
// while each cache row read still serves many rows.
constexpr int kMaxRows = 64;
// Fewest heads per unit (a multiple of kPvRows): every unit streams the whole context, so
// thinner units mostly add memory traffic.
constexpr int kMinHeads = 8;
// Below about this many multiply-adds per thread the work stays on the calling thread.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 15;

struct Params {
  const MlaCacheLayer& cache;
  const AttentionBatch& batch;
  int num_heads;
  float scale;
  DType act;
  int64_t lp, kp;  // the latent padded to a multiple of 8; a key row [c | kpe], both padded
  bool direct;     // f32 cache with both parts multiples of 8 wide: rows are read in place
};

// One unit of work: tokens [t0, t1) of one sequence (consecutive positions) × heads [h0, h1).
// Query row r is token t0 + r / (h1 - h0), head h0 + r % (h1 - h0).
struct Unit {
  int64_t t0, t1;
  int seq;
  int h0, h1;
};

// Per-thread buffers carved from one allocation, grown as needed and reused across units and
// calls. Each part starts on a 64-byte line: loads split across lines cost a quarter of the
// kernel's speed.
struct Scratch {
  std::vector<float> buf;
  float* q = nullptr;         // [nq, kp] the unit's query rows [q_lat | q_rope], both parts padded
  float* out = nullptr;       // [nq, lp] latent outputs
  float* scores = nullptr;    // [nq, lenp] scores, then probabilities
  float* rows = nullptr;      // [kKeyBlock, kp] widened cache rows
  float* zero = nullptr;      // [kp] the row read for keys past the context
  std::vector<uint8_t> keep;  // sparse attention: whether the token attends to key j

  void carve(int64_t nq, int64_t kp, int64_t lp, int64_t lenp) {
    auto lines = [](int64_t n) { return (n + 15) & ~int64_t(15); };
    const int64_t sizes[5] = {lines(nq * kp), lines(nq * lp), lines(nq * lenp),
                              lines(kKeyBlock * kp), lines(kp)};
    int64_t total = 0;
    for (int64_t n : sizes) total += n;
    float* at = cache_aligned(buf, size_t(total));
    float** parts[5] = {&q, &out, &scores, &rows, &zero};
    for (int i = 0; i < 5; ++i) {
      *parts[i] = at;
      at += sizes[i];
    }
    std::fill_n(out, nq * lp, 0.0f);
    std::fill_n(zero, kp, 0.0f);
  }
};

// Points row[jj] (jj < count) at key j0 + jj of the sequence as f32 [c | kpe] with both parts
// padded to a multiple of 8: in place for a direct cache, else widened into scratch (kpe only if
// `rope`). Keys at or past len read a zero row.
void gather_keys(const Params& p, const int32_t* table, int64_t j0, int64_t len, bool rope,
                 int count, Scratch& s, const float** row) {
  const MlaCacheLayer& c = p.cache;
  const int64_t row_elems = c.row_elems();
  const size_t es = cache_row_bytes(c.dtype, 1);
  const CacheRowCodec codec{c.dtype, nullptr, nullptr, c.scale};
  for (int jj = 0; jj < count; ++jj) {
    const int64_t j = j0 + jj;
    if (j >= len) {
      row[jj] = s.zero;
      continue;
    }
    const int64_t slot = int64_t(table[j / c.block_size]) * c.block_size + j % c.block_size;
    const uint8_t* src = static_cast<const uint8_t*>(c.data) + size_t(slot * row_elems) * es;
    if (p.direct) {
      row[jj] = reinterpret_cast<const float*>(src);
      continue;
    }
    float* dst = s.rows + jj * p.kp;
    widen_cache_row(codec, src, dst, c.latent_dim);
    if (rope) widen_cache_row(codec, src + size_t(c.latent_dim) * es, dst + p.lp, c.rope_dim);
    row[jj] = dst;
  }
}

// Scaled scores of R (≤ kScoreRows) query rows against four keys, stored at sc[r] + at + 0..3. Each
// (row, key) dot product is eight-lane partial sums in dimension order reduced by hsum8x8's
// fixed tree, so it does not depend on which rows or keys share the kernel.
template <int R>
void score_block(const Params& p, const float* const* q, const float* const* k, float* const* sc,
                 int64_t at) {
  static_assert(R * kScoreKeys <= 8);
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t d = 0; d < p.kp; d += 8) {
    __m256 kv[kScoreKeys];
#pragma GCC unroll 4
    for (int i = 0; i < kScoreKeys; ++i) kv[i] = _mm256_loadu_ps(k[i] + d);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q[r] + d);
#pragma GCC unroll 4
      for (int i = 0; i < kScoreKeys; ++i)
        acc[r * kScoreKeys + i] = _mm256_fmadd_ps(qv, kv[i], acc[r * kScoreKeys + i]);
    }
  }
  __m256 v = simd::round_to8(p.act, simd::hsum8x8(acc));
  v = simd::round_to8(p.act, _mm256_mul_ps(v, _mm256_set1_ps(p.scale)));
  _mm_storeu_ps(sc[0] + at, _mm256_castps256_ps128(v));
  if constexpr (R == 2) _mm_storeu_ps(sc[1] + at, _mm256_extractf128_ps(v, 1));
}

// o[r][d0 .. d0 + 8·V) += Σ_{jj < keys} pr[r][jj] · c[jj][same] for R (≤ kPvRows) rows; each
// row's sum runs over the keys in order, whatever rows share the kernel.
template <int R, int V>
void pv_block(float* const* o, const float* const* pr, const float* const* c, int keys,
              int64_t d0) {
  __m256 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_loadu_ps(o[r] + d0 + 8 * v);
  for (int jj = 0; jj < keys; ++jj) {
    __m256 cv[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) cv[v] = _mm256_loadu_ps(c[jj] + d0 + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pj = _mm256_broadcast_ss(pr[r] + jj);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(pj, cv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(o[r] + d0 + 8 * v, acc[r][v]);
}

// pv_block over the whole padded latent (lp floats): full slices, then the remainder.
template <int R>
void pv_rows(float* const* o, const float* const* pr, const float* const* c, int keys, int64_t lp) {
  constexpr int64_t kSlice = 8 * kPvVecs;
  int64_t d0 = 0;
  for (; d0 + kSlice <= lp; d0 += kSlice) pv_block<R, kPvVecs>(o, pr, c, keys, d0);
  static_assert(kPvVecs == 3);
  if (lp - d0 == 16) pv_block<R, 2>(o, pr, c, keys, d0);
  if (lp - d0 == 8) pv_block<R, 1>(o, pr, c, keys, d0);
}

// Sparse attention: the scores of the keys a token does not attend to become −inf, so their
// probabilities are exact zeros and add nothing to P·C. A token that keeps every key computes
// what dense attention does, bit for bit.
void mask_unselected(const Params& p, const Unit& u, int64_t lenp, Scratch& s) {
  const int nh = u.h1 - u.h0;
  const int per = p.batch.keys_per_token;
  for (int64_t t = u.t0; t < u.t1; ++t) {
    const int64_t n = int64_t(p.batch.positions[t]) + 1;
    s.keep.assign(size_t(n), 0);
    const int32_t* picks = p.batch.selected_keys + t * per;
    for (int i = 0; i < per; ++i)
      if (picks[i] >= 0 && picks[i] < n) s.keep[size_t(picks[i])] = 1;
    for (int h = 0; h < nh; ++h) {
      float* row = s.scores + ((t - u.t0) * nh + h) * lenp;
      for (int64_t j = 0; j < n; ++j)
        if (!s.keep[size_t(j)]) row[j] = -std::numeric_limits<float>::infinity();
    }
  }
}

// Pass 1 scores every (row, key ≤ the row's position), pass 2 takes each row's softmax (exact
// max; exp and sum in blocks of eight), pass 3 accumulates P·C in key order. The rows of one
// token are consecutive, so every kernel call covers rows of a single position.
void attend(const Params& p, const Unit& u, const float* q_lat, const float* q_rope, float* out_all,
            Scratch& s) {
  const MlaCacheLayer& c = p.cache;
  const int nh = u.h1 - u.h0, nt = int(u.t1 - u.t0), nq = nt * nh;
  const int64_t lp = p.lp, kp = p.kp;
  const DType op = quantized_kv_cache(c.dtype) ? p.act : c.dtype;
  const DType p_dtype = p.act != DType::F32 ? p.act : op;
  const int32_t* table = p.batch.block_tables + int64_t(u.seq) * p.batch.max_blocks_per_seq;
  const int32_t* pos = p.batch.positions + u.t0;
  const int64_t len = int64_t(*std::max_element(pos, pos + nt)) + 1, lenp = round_up8(len);

  s.carve(nq, kp, lp, lenp);
  for (int r = 0; r < nq; ++r) {
    const int64_t src = (u.t0 + r / nh) * p.num_heads + u.h0 + r % nh;
    float* dst = s.q + r * kp;
    std::fill(dst, dst + kp, 0.0f);
    std::copy_n(q_lat + src * c.latent_dim, c.latent_dim, dst);
    std::copy_n(q_rope + src * c.rope_dim, c.rope_dim, dst + lp);
    for (int64_t d = 0; d < kp; d += 8)
      _mm256_storeu_ps(dst + d, simd::round_to8(op, _mm256_loadu_ps(dst + d)));
  }

  const float* rows[kKeyBlock];
  for (int64_t j0 = 0; j0 < len; j0 += kScoreBlock) {
    gather_keys(p, table, j0, len, true, kScoreBlock, s, rows);
    // Per head pair, all keys of the block: the pair's q rows stay in L1 with the block.
    for (int i = 0; i < nt; ++i) {
      if (pos[i] < j0) continue;
      const int64_t keys = std::min<int64_t>(kScoreBlock, pos[i] - j0 + 1);
      for (int h = 0; h < nh; h += kScoreRows) {
        const bool pair = h + 1 < nh;
        const int r = i * nh + h;
        const float* q[kScoreRows] = {s.q + r * kp, nullptr};
        float* sc[kScoreRows] = {s.scores + r * lenp + j0, nullptr};
        if (pair) {
          q[1] = q[0] + kp;
          sc[1] = sc[0] + lenp;
        }
        for (int kq = 0; kq < keys; kq += kScoreKeys) {
          if (pair) {
            score_block<2>(p, q, rows + kq, sc, kq);
          } else {
            score_block<1>(p, q, rows + kq, sc, kq);
          }
        }
      }
    }
  }

  if (p.batch.selected_keys != nullptr) mask_unselected(p, u, lenp, s);
  // Softmax of each row over its own keys.
  for (int r = 0; r < nq; ++r) softmax_row(s.scores + r * lenp, int64_t(pos[r / nh]) + 1, p_dtype);

  for (int64_t j0 = 0; j0 < len; j0 += kKeyBlock) {
    gather_keys(p, table, j0, len, false, kKeyBlock, s, rows);
    for (int i = 0; i < nt; ++i) {
      if (pos[i] < j0) continue;
      const int keys = int(std::min<int64_t>(kKeyBlock, pos[i] - j0 + 1));
      for (int h = 0; h < nh; h += kPvRows) {
        const int rows_here = std::min(kPvRows, nh - h);
        float* o[kPvRows];
        const float* pr[kPvRows];
        for (int k = 0; k < rows_here; ++k) {
          const int r = i * nh + h + k;
          o[k] = s.out + r * lp;
          pr[k] = s.scores + r * lenp + j0;
        }
        switch (rows_here) {
          case 4:
            pv_rows<4>(o, pr, rows, keys, lp);
            break;
          case 3:
            pv_rows<3>(o, pr, rows, keys, lp);
            break;
          case 2:
            pv_rows<2>(o, pr, rows, keys, lp);
            break;
          default:
            pv_rows<1>(o, pr, rows, keys, lp);
            break;
        }
      }
    }
  }

  for (int r = 0; r < nq; ++r) {
    float* o = s.out + r * lp;
    for (int64_t d = 0; d < lp; d += 8)
      _mm256_storeu_ps(o + d, simd::round_to8(p.act, _mm256_loadu_ps(o + d)));
    const int64_t dst = (u.t0 + r / nh) * p.num_heads + u.h0 + r % nh;
    std::copy_n(o, c.latent_dim, out_all + dst * c.latent_dim);
  }
}

// Latent rows are one code per value: FP8 with a per-tensor scale, no per-group formats.
void check_mla_cache_dtype(DType t) {
  KCHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8_E4M3 ||
             t == DType::F8_E5M2,
         "unsupported MLA cache dtype {}", dtype_name(t));
}

// mla_attention's units, made by the caller and read by the job.
struct AttentionUnits {
  std::vector<Unit> units;
};

}  // namespace

void write_mla_cache(const MlaCacheLayer& cache, const float* latent, const float* k_rope,
                     const AttentionBatch& batch) {
  check_mla_cache_dtype(cache.dtype);
  const size_t es = cache_row_bytes(cache.dtype, 1);
  const CacheRowCodec codec{cache.dtype, nullptr, nullptr, cache.scale};
  const int64_t row_elems = cache.row_elems();
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    KCHECK(slot >= 0 && slot < cache.num_blocks * cache.block_size, "slot {} out of range", slot);
    uint8_t* dst = static_cast<uint8_t*>(cache.data) + size_t(slot * row_elems) * es;
    store_cache_row(codec, latent + t * cache.latent_dim, dst, cache.latent_dim);
    store_cache_row(codec, k_rope + t * cache.rope_dim, dst + size_t(cache.latent_dim) * es,
                    cache.rope_dim);
  }
}

void mla_attention(const float* q_lat, const float* q_rope, const MlaCacheLayer& cache,
                   const AttentionBatch& batch, int num_heads, float scale, float* out,
                   ThreadPool& pool, DType act, ThreadScratch* scratch) {
  check_mla_cache_dtype(cache.dtype);
  KCHECK(num_heads > 0 && cache.latent_dim > 0 && cache.rope_dim >= 0,
         "bad MLA shape: {} heads, latent {}, rope {}", num_heads, cache.latent_dim,
         cache.rope_dim);
  KCHECK(batch.sliding_window == 0, "MLA has no sliding-window form (window {})",
         batch.sliding_window);
  KCHECK(batch.selected_keys == nullptr || batch.keys_per_token > 0,
         "sparse attention with {} keys per token", batch.keys_per_token);
  // Units: each sequence's tokens in tiles of kQueryTile, times head tiles. Splitting heads
  // changes no arithmetic, so the tile is free to follow the batch: whole heads for prefill
  // tiles up to kMaxRows rows, split further when there are too few units for the threads
  // (a lone long decode). Longest contexts first so the dynamic split ends evenly.
  int64_t tiles = 0;
  for_each_query_tile(batch, kQueryTile, [&](int, int64_t, int64_t) { ++tiles; });
  // Head splits giving about two units per thread.
  const int splits = int(std::clamp<int64_t>(
      (2 * int64_t(pool.size()) + tiles - 1) / std::max<int64_t>(tiles, 1), 1, num_heads));
  const int split_heads = std::max(kMinHeads, (num_heads + splits - 1) / splits);
  ThreadScratch own(scratch != nullptr ? 0 : pool.size());
  ThreadScratch& arenas = scratch != nullptr ? *scratch : own;
  // In the caller's arena: no allocation per layer once the largest batch has been seen.
  std::vector<Unit>& units = arenas[0].get<AttentionUnits>().units;
  units.clear();
  for_each_query_tile(batch, kQueryTile, [&](int s, int64_t t0, int64_t t1) {
    int ht = std::min(split_heads, std::max(kMinHeads, kMaxRows / int(t1 - t0)));
    ht = std::min(num_heads, (ht + kPvRows - 1) / kPvRows * kPvRows);
    for (int h0 = 0; h0 < num_heads; h0 += ht)
      units.push_back({t0, t1, s, h0, std::min(num_heads, h0 + ht)});
  });
  std::sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    return batch.positions[a.t1 - 1] > batch.positions[b.t1 - 1];
  });
  const int64_t lp = round_up8(cache.latent_dim), kp = lp + round_up8(cache.rope_dim);
  const bool direct = cache.dtype == DType::F32 && cache.latent_dim % 8 == 0 &&
                      cache.rope_dim % 8 == 0 && cache.row_elems() % 8 == 0;
  const Params params{cache, batch, num_heads, scale, act, lp, kp, direct};
  int64_t work = 0;
  for (const Unit& u : units)
    work += (u.t1 - u.t0) * (u.h1 - u.h0) * (int64_t(batch.positions[u.t1 - 1]) + 1);
  work *= kp + lp;
  const int64_t grain =
      std::max<int64_t>(1, kMinMacsPerThread * int64_t(units.size()) / std::max<int64_t>(work, 1));
  pool.parallel_for(int64_t(units.size()), grain, [&](int64_t begin, int64_t end, int thread) {
    Scratch& s = arenas[thread].get<Scratch>();
    for (int64_t i = begin; i < end; ++i) attend(params, units[size_t(i)], q_lat, q_rope, out, s);
  });
}

}  // namespace kestrel::cpu
