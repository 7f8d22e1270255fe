#include "backend/cpu/paged_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/attention_rows.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/simd_math.h"
#include "base/fp16.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

// Query tokens of one sequence that share every K/V row read (a prefill tile). Each query's
// arithmetic is the same whatever tile it is in, so outputs do not depend on the batch.
constexpr int kQueryTile = 8;
// Keys scored together: eight dot products reduce into one vector.
constexpr int kKeyBlock = kAttentionKeyBlock;
// Below about this many multiply-adds per thread the work stays on the calling thread.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 15;

// Where each key's cached row (one token, one KV head) starts, in bytes from the cache base,
// for keys j0 .. j0 + n - 1 (offs[i] is key j0 + i's): the block table walked once per unit
// instead of a division per row read.
void key_offsets(const KVLayer& c, const int32_t* block_table, int kv_head, int64_t j0, int64_t n,
                 std::vector<int64_t>& offs) {
  offs.resize(size_t(n));
  const int64_t row_bytes = int64_t(cache_row_bytes(c.dtype, c.head_dim));
  int64_t blk = j0 / c.block_size, off = j0 % c.block_size;
  for (int64_t i = 0; i < n; ++i) {
    offs[size_t(i)] =
        ((int64_t(block_table[blk]) * c.num_kv_heads + kv_head) * c.block_size + off) * row_bytes;
    if (++off == c.block_size) {
      off = 0;
      ++blk;
    }
  }
}

// One unit of work: tokens [t0, t1) of one sequence (consecutive positions) and one KV head,
// i.e. (t1 - t0) × group query rows.
struct Unit {
  int64_t t0, t1;
  int seq;
  int kv_head;
};

// Per-thread buffers, grown as needed and reused across units and calls.
struct Scratch {
  std::vector<float> q, out, scores, rows, key_row;
  std::vector<int64_t> offs;
  std::vector<uint8_t> active, all_active;
  std::vector<int8_t> first, end, all_first, all_end;
};

struct Params {
  const KVLayer& cache;
  const AttentionBatch& batch;
  int num_heads, group, hd;
  float scale;
  DType act;
  const AttentionKernels& kernels;
};

// The block kernels of the ISA linear() runs (KESTREL_CPU_ISA caps both); same bits either way.
const AttentionKernels& attention_kernels() {
  const AttentionKernels* k512 = avx512_attention_kernels();
  if (k512 != nullptr && avx512_selected()) return *k512;
  return avx2_attention_kernels();
}

// Scores (two passes: every score of a row, then softmax), then P·V. Per query row the steps and
// their order depend only on its own position and data:
//   s_j = dot(q, k_j) (eight-lane partial sums in dimension order, then a fixed tree) · scale,
//   p = softmax(s) (exact max; exp and sum over the row in blocks of eight),
//   out = Σ_j p_j · v_j in key order.
// With a half-precision cache, q and p are rounded to it (the operands of a half GEMM); a
// quantized cache's rows are widened to f32 (dequantized) and q and p are kept in `act`. With
// reduced-precision activations the scores, scaled scores and output are rounded to `act`.
void attend(const Params& p, const Unit& u, const float* q_all, float* out_all, Scratch& s) {
  const int hd = p.hd, group = p.group;
  const int64_t hdp = round_up8(hd);
  const DType op = quantized_kv_cache(p.cache.dtype) ? p.act : p.cache.dtype;
  const DType p_dtype = p.act != DType::F32 ? p.act : op;
  const CacheRowCodec key_codec = key_row_codec(p.cache, u.kv_head);
  const CacheRowCodec value_codec = value_row_codec(p.cache, u.kv_head);
  const int nq = int(u.t1 - u.t0) * group;
  const int64_t window = p.batch.sliding_window;
  // The first key a query at `pos` sees: 0, or the start of its sliding window.
  auto first_key = [&](int64_t pos) {
    return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  };
  int32_t max_pos = 0, min_pos = std::numeric_limits<int32_t>::max();
  for (int64_t t = u.t0; t < u.t1; ++t) {
    max_pos = std::max(max_pos, p.batch.positions[t]);
    min_pos = std::min(min_pos, p.batch.positions[t]);
  }
  const int64_t len = int64_t(max_pos) + 1;
  // Keys before begin are out of every window of the unit (their blocks may be gone). Rows of
  // s.scores are indexed from begin, with room for softmax_row's padding after any key.
  const int64_t begin = first_key(min_pos) / kKeyBlock * kKeyBlock;
  const int64_t stride = round_up8(len - begin) + kKeyBlock;
  key_offsets(p.cache, p.batch.block_tables + int64_t(u.seq) * p.batch.max_blocks_per_seq,
              u.kv_head, begin, len - begin, s.offs);
  // The cached rows of keys j0 .. j0 + nk - 1 of K or V, widened into s.rows. Cached rows are
  // scattered over the blocks and read once per step, so the next block's rows are prefetched:
  // waiting on them was most of the widening time in batched decode.
  const int64_t row_bytes = int64_t(cache_row_bytes(p.cache.dtype, hd));
  auto block_rows = [&](const void* base, int64_t j0, int nk, const uint8_t** src) {
    const auto* b = static_cast<const uint8_t*>(base);
    for (int jj = 0; jj < nk; ++jj) src[jj] = b + s.offs[size_t(j0 - begin + jj)];
    for (int64_t j = j0 + kKeyBlock; j < std::min(len, j0 + 2 * kKeyBlock); ++j)
      for (int64_t off = 0; off < row_bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(b + s.offs[size_t(j - begin)] + off),
                     _MM_HINT_T0);
  };

  s.q.resize(size_t(nq) * hdp);
  s.out.assign(size_t(nq) * hdp, 0.0f);
  s.scores.resize(size_t(nq) * stride);
  s.rows.resize(size_t(kKeyBlock) * hdp);
  s.key_row.resize(size_t(hdp));
  auto pos_of = [&](int r) { return int64_t(p.batch.positions[u.t0 + r / group]); };
  for (int r = 0; r < nq; ++r) {
    const int64_t t = u.t0 + r / group;
    const float* src = q_all + (t * p.num_heads + int64_t(u.kv_head) * group + r % group) * hd;
    float* dst = s.q.data() + r * hdp;
    std::copy(src, src + hd, dst);
    std::fill(dst + hd, dst + hdp, 0.0f);
    for (int64_t d = 0; d < hdp; d += 8)
      _mm256_storeu_ps(dst + d, simd::round_to8(op, _mm256_loadu_ps(dst + d)));
  }

  // Pass 1: scores, eight keys at a time. Cached rows are scattered over the blocks and read
  // once per step, so the next block's rows are prefetched: waiting on them was most of the
  // widening time in batched decode.
  // Blocks of keys [j0, j0 + 8) with j0 + 7 <= min_pos and j0 >= max_lo are seen whole by every
  // row (all but the causal diagonal and the window's edge): their per-row masks are constant.
  const int64_t max_lo = first_key(max_pos);
  auto whole = [&](int64_t j0) { return j0 + kKeyBlock - 1 <= min_pos && j0 >= max_lo; };
  s.active.resize(size_t(nq));
  s.all_active.assign(size_t(nq), 1);
  const uint8_t* src[kKeyBlock];
  for (int64_t j0 = begin; j0 < len; j0 += kKeyBlock) {
    const int nk = int(std::min<int64_t>(kKeyBlock, len - j0));
    block_rows(p.cache.k, j0, nk, src);
    p.kernels.widen_keys(key_codec, src, nk, s.rows.data(), hdp, hd, s.key_row.data());
    const bool all = whole(j0);
    if (!all)
      for (int r = 0; r < nq; ++r)
        s.active[size_t(r)] = pos_of(r) >= j0 && first_key(pos_of(r)) < j0 + kKeyBlock;
    p.kernels.scores(s.q.data(), nq, hdp, s.rows.data(),
                     all ? s.all_active.data() : s.active.data(), p.scale, p.act,
                     s.scores.data() + (j0 - begin), stride);
  }

  // Pass 2: softmax of each row over its own keys (from its own first key, so the order of the
  // sums depends on its position only).
  for (int r = 0; r < nq; ++r) {
    const int64_t lo = first_key(pos_of(r));
    float* row = s.scores.data() + r * stride + (lo - begin);
    if (p.batch.sinks != nullptr) {
      const float sink = p.batch.sinks[int64_t(u.kv_head) * group + r % group];
      softmax_row_with_sink(row, pos_of(r) - lo + 1, sink, p_dtype);
    } else {
      softmax_row(row, pos_of(r) - lo + 1, p_dtype);
    }
  }

  // Pass 3: out += p_j · v_j in key order, V rows widened eight at a time for the whole unit.
  s.first.resize(size_t(nq));
  s.end.resize(size_t(nq));
  s.all_first.assign(size_t(nq), 0);
  s.all_end.assign(size_t(nq), int8_t(kKeyBlock));
  for (int64_t j0 = begin; j0 < len; j0 += kKeyBlock) {
    const int nk = int(std::min<int64_t>(kKeyBlock, len - j0));
    block_rows(p.cache.v, j0, nk, src);
    widen_cache_rows(value_codec, src, nk, s.rows.data(), hdp, hd);
    if (whole(j0)) {
      p.kernels.accumulate(s.scores.data() + (j0 - begin), stride, s.rows.data(), hdp, nq,
                           s.all_first.data(), s.all_end.data(), s.out.data());
      continue;
    }
    for (int r = 0; r < nq; ++r) {
      const int64_t pos = pos_of(r), lo = first_key(pos);
      const bool sees = pos >= j0 && lo < j0 + nk;
      s.first[size_t(r)] = int8_t(sees ? std::max<int64_t>(0, lo - j0) : 0);
      s.end[size_t(r)] = int8_t(sees ? std::min<int64_t>(nk, pos - j0 + 1) : 0);
    }
    p.kernels.accumulate(s.scores.data() + (j0 - begin), stride, s.rows.data(), hdp, nq,
                         s.first.data(), s.end.data(), s.out.data());
  }
  for (int r = 0; r < nq; ++r) {
    const int64_t t = u.t0 + r / group;
    float* o = s.out.data() + r * hdp;
    for (int64_t d = 0; d < hdp; d += 8)
      _mm256_storeu_ps(o + d, simd::round_to8(p.act, _mm256_loadu_ps(o + d)));
    std::copy(o, o + hd, out_all + (t * p.num_heads + int64_t(u.kv_head) * group + r % group) * hd);
  }
}

// write_kv's K row rotated on its way.
struct RotatedKey {
  std::vector<float> row;
};

// paged_attention's units, made by the caller and read by the job.
struct AttentionUnits {
  std::vector<Unit> units;
};

}  // namespace

void write_kv(const KVLayer& cache, const float* k, const float* v, const AttentionBatch& batch,
              const RopeParams* rope_k, ScratchArena* scratch) {
  const int hd = cache.head_dim;
  const int64_t row = int64_t(cache.num_kv_heads) * hd;
  const int64_t row_bytes = int64_t(cache_row_bytes(cache.dtype, hd));
  ScratchArena own;
  ScratchArena& arena = scratch != nullptr ? *scratch : own;
  std::vector<float>& rotated = arena.get<RotatedKey>().row;
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    KCHECK(slot >= 0 && slot < cache.num_blocks * cache.block_size, "slot {} out of range", slot);
    const float* kr = k + t * row;
    if (rope_k != nullptr) {
      rotated.assign(kr, kr + row);
      apply_rope(rotated.data(), 1, cache.num_kv_heads, hd, batch.positions + t, *rope_k, &arena);
      kr = rotated.data();
    }
    for (int h = 0; h < cache.num_kv_heads; ++h) {
      const int64_t at = kv_row_index(cache, slot, h) * row_bytes;
      store_cache_row(key_row_codec(cache, h), kr + h * hd, static_cast<uint8_t*>(cache.k) + at,
                      hd);
      store_cache_row(value_row_codec(cache, h), v + t * row + h * hd,
                      static_cast<uint8_t*>(cache.v) + at, hd);
    }
  }
}

void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                     int num_heads, float scale, float* out, ThreadPool& pool, DType act,
                     ThreadScratch* scratch) {
  const int kvh = cache.num_kv_heads;
  KCHECK(num_heads % kvh == 0, "heads {} not a multiple of kv heads {}", num_heads, kvh);
  KCHECK(batch.selected_keys == nullptr, "sparse key selection is an MLA form only");
  KCHECK(cache.dtype == DType::F32 || cache.dtype == DType::F16 || cache.dtype == DType::BF16 ||
             quantized_kv_cache(cache.dtype),
         "unsupported KV cache dtype {}", dtype_name(cache.dtype));
  // Units: each sequence's tokens in tiles of kQueryTile, times the KV heads; the longest
  // contexts (last tiles) first so the dynamic split ends evenly, and stably, so that a tile's
  // heads stay adjacent and one thread reads that sequence's blocks back to back.
  ThreadScratch own(scratch != nullptr ? 0 : pool.size());
  ThreadScratch& arenas = scratch != nullptr ? *scratch : own;
  // In the caller's arena: no allocation per layer once the largest batch has been seen.
  std::vector<Unit>& units = arenas[0].get<AttentionUnits>().units;
  units.clear();
  for_each_query_tile(batch, kQueryTile, [&](int s, int64_t t0, int64_t t1) {
    for (int h = 0; h < kvh; ++h) units.push_back({t0, t1, s, h});
  });
  std::stable_sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    return batch.positions[a.t1 - 1] > batch.positions[b.t1 - 1];
  });
  const Params params{cache,          batch, num_heads, num_heads / kvh,
                      cache.head_dim, scale, act,       attention_kernels()};
  // Short contexts (early decode steps) are cheaper than waking the workers.
  int64_t work = 0;
  for (const Unit& u : units) {
    const int64_t keys = int64_t(batch.positions[u.t1 - 1]) + 1;
    work += (u.t1 - u.t0) *
            (batch.sliding_window > 0 ? std::min<int64_t>(keys, batch.sliding_window) : keys);
  }
  work *= int64_t(num_heads / kvh) * cache.head_dim;
  const int64_t grain =
      std::max<int64_t>(1, kMinMacsPerThread * int64_t(units.size()) / std::max<int64_t>(work, 1));
  pool.parallel_for(int64_t(units.size()), grain, [&](int64_t begin, int64_t end, int thread) {
    Scratch& s = arenas[thread].get<Scratch>();
    for (int64_t i = begin; i < end; ++i) attend(params, units[size_t(i)], q, out, s);
  });
}

}  // namespace kestrel::cpu
