// Microbenchmarks of cpu::paged_attention over a paged KV cache (block size 16, blocks of each
// sequence scattered through the pool as a long-running server leaves them).
//
// Run:   bench/kernels/run.sh --benchmark_filter=attention
//   or:  ./build-bench/bench/kernels/attention_bench --benchmark_min_time=0.05
// Case names read attention/<decode|prefill|decode_swa4096>/<model>/<cache dtype>/ctx:<context>/
// threads:<n> (cache dtypes: f16, f32, and the quantized fp8 (E4M3), mxfp8 and int8 (C8) rows
// with unit scales); decode_swa4096 is decode through a sliding window of 4,096 keys
// (Mistral-7B's). Models: smollm2 (head_dim 64, 9 query / 3 KV heads) and llama3_8b (head_dim 128,
// 32 / 8). decode: 8 sequences, each one new query at position ctx-1 (every sequence reads ctx
// tokens). prefill: one sequence, 512 new queries at positions 0..511 (causal, so ctx is 512). Only
// the attention is timed; the K/V of the step are already in the cache.
//
// Columns: Time is wall time per call. items/s = queries per second. GB/s (decode only) = K and
// V bytes of every sequence's context (with a window: of its window) over time, the least a call
// must read — decode is bound by it. GMAC/s = multiply-accumulates of Q·Kᵀ and P·V per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cache_rows.h"
#include "backend/cpu/paged_attention.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {
namespace {

constexpr int kBlockSize = 16;
constexpr int kDecodeSeqs = 8;
constexpr int kPrefillTokens = 512;

struct ModelShape {
  const char* label;
  int head_dim, num_heads, num_kv_heads;
};

// One step's attention inputs: a random cache holding every sequence's context, the block
// tables that scatter it, and the queries.
struct AttentionCase {
  std::vector<uint8_t> k, v;
  KVLayer layer;
  std::vector<int32_t> positions, query_start_loc, block_tables;
  std::vector<int64_t> slots;
  AttentionBatch batch;
  std::vector<float> q, out;
  double kv_bytes = 0;  // K/V bytes one call reads
  double macs = 0;      // multiply-accumulates of one call
};

// Rows of head_dim values uniform in [-1, 1], stored as the cache stores them (codes with scale
// 1 for the quantized formats, MXFP8's per-32 scales chosen per row).
void fill_random(std::vector<uint8_t>& buf, DType dtype, int head_dim, std::minstd_rand& rng) {
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(head_dim));
  const size_t row_bytes = cache_row_bytes(dtype, head_dim);
  for (size_t at = 0; at + row_bytes <= buf.size(); at += row_bytes) {
    for (float& x : row) x = ud(rng);
    store_cache_row({dtype}, row.data(), buf.data() + at, head_dim);
  }
}

// `num_seqs` sequences of `ctx` tokens whose last `new_tokens` are this step's queries.
void build_case(AttentionCase& c, const ModelShape& model, DType dtype, int num_seqs, int ctx,
                int new_tokens, int window) {
  std::minstd_rand rng(uint32_t(ctx * 31 + num_seqs));
  const int blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  const int64_t num_blocks = int64_t(blocks_per_seq) * num_seqs;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.block_tables = perm;

  const int64_t row_elems = int64_t(model.num_kv_heads) * model.head_dim;
  const size_t cache_bytes = dtype_bytes(dtype, num_blocks * kBlockSize * row_elems);
  c.k.resize(cache_bytes);
  c.v.resize(cache_bytes);
  fill_random(c.k, dtype, model.head_dim, rng);
  fill_random(c.v, dtype, model.head_dim, rng);
  c.layer = {c.k.data(), c.v.data(),         dtype,         num_blocks,
             kBlockSize, model.num_kv_heads, model.head_dim};

  c.query_start_loc = {0};
  for (int s = 0; s < num_seqs; ++s) {
    for (int p = ctx - new_tokens; p < ctx; ++p) {
      c.positions.push_back(p);
      c.slots.push_back(int64_t(perm[size_t(s) * blocks_per_seq + p / kBlockSize]) * kBlockSize +
                        p % kBlockSize);
    }
    c.query_start_loc.push_back(c.query_start_loc.back() + new_tokens);
  }
  const int64_t tokens = int64_t(c.positions.size());
  c.batch = {tokens,
             num_seqs,
             c.positions.data(),
             c.slots.data(),
             c.query_start_loc.data(),
             c.block_tables.data(),
             blocks_per_seq};
  c.batch.sliding_window = window;

  c.q.resize(size_t(tokens * model.num_heads * model.head_dim));
  c.out.resize(c.q.size());
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (float& x : c.q) x = ud(rng);

  const int64_t keys_read = window > 0 ? std::min(ctx, window) : ctx;
  c.kv_bytes = 2.0 * double(dtype_bytes(dtype, int64_t(num_seqs) * keys_read * row_elems));
  double keys_attended = 0;  // Σ over queries of the keys each one sees
  for (int32_t p : c.positions) keys_attended += window > 0 ? std::min(p + 1, window) : p + 1;
  c.macs = 2.0 * keys_attended * model.num_heads * model.head_dim;
}

// Google Benchmark calls a case several times while it settles the iteration count, and the
// cache of a long context takes a while to fill: keep the most recent case (the thread counts of
// one case are registered next to each other).
AttentionCase& cached_case(const ModelShape& model, DType dtype, int num_seqs, int ctx,
                           int new_tokens, int window) {
  static std::string key;
  static std::unique_ptr<AttentionCase> cached;
  const std::string want = std::string(model.label) + "/" + std::string(dtype_name(dtype)) + "/" +
                           std::to_string(num_seqs) + "/" + std::to_string(ctx) + "/" +
                           std::to_string(new_tokens) + "/" + std::to_string(window);
  if (want != key) {
    cached.reset();
    cached = std::make_unique<AttentionCase>();
    build_case(*cached, model, dtype, num_seqs, ctx, new_tokens, window);
    key = want;
  }
  return *cached;
}

void bm_attention(benchmark::State& state, ModelShape model, DType dtype, int num_seqs,
                  int new_tokens, int window) {
  AttentionCase& c = cached_case(model, dtype, num_seqs, int(state.range(0)), new_tokens, window);
  ThreadPool pool(int(state.range(1)));
  ThreadScratch scratch(pool.size());  // the backend's, kept across calls
  const float scale = 1.0f / std::sqrt(float(model.head_dim));
  for (auto _ : state) {
    paged_attention(c.q.data(), c.layer, c.batch, model.num_heads, scale, c.out.data(), pool,
                    DType::F32, &scratch);
    benchmark::DoNotOptimize(c.out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * c.batch.num_tokens);
  // Prefill reuses each key across many queries, so its bytes say nothing about the kernel.
  if (new_tokens == 1) {
    state.counters["GB/s"] =
        benchmark::Counter(c.kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.counters["GMAC/s"] =
      benchmark::Counter(c.macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const ModelShape models[] = {{"smollm2", 64, 9, 3}, {"llama3_8b", 128, 32, 8}};
  const std::pair<const char*, DType> dtypes[] = {{"f16", DType::F16},
                                                  {"f32", DType::F32},
                                                  {"fp8", DType::F8_E4M3},
                                                  {"mxfp8", DType::MXFP8},
                                                  {"int8", DType::I8}};
  for (const ModelShape& model : models) {
    for (const auto& [dtype_label, dtype] : dtypes) {
      const std::string suffix = std::string(model.label) + "/" + dtype_label;
      auto* decode = benchmark::RegisterBenchmark(("attention/decode/" + suffix).c_str(),
                                                  bm_attention, model, dtype, kDecodeSeqs, 1, 0);
      auto* prefill =
          benchmark::RegisterBenchmark(("attention/prefill/" + suffix).c_str(), bm_attention, model,
                                       dtype, 1, kPrefillTokens, 0);
      auto* windowed =
          benchmark::RegisterBenchmark(("attention/decode_swa4096/" + suffix).c_str(), bm_attention,
                                       model, dtype, kDecodeSeqs, 1, 4096);
      for (auto* b : {decode, prefill, windowed})
        b->ArgNames({"ctx", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int64_t ctx : {512, 4096, 16384})
        for (int64_t threads : {1, 2}) decode->Args({ctx, threads});
      for (int64_t threads : {1, 2}) windowed->Args({16384, threads});
      for (int64_t threads : {1, 2}) prefill->Args({kPrefillTokens, threads});
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kestrel::cpu::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
