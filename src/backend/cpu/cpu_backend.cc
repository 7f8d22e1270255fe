#include "backend/backend.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/gated_deltanet.h"
#include "backend/cpu/hyper_connection.h"
#include "backend/cpu/lightning_indexer.h"
#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mla_attention.h"
#include "backend/cpu/moe_routing.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/sampling.h"
#include "backend/cpu/thread_scratch.h"
#include "base/logging.h"
#include "base/thread_pool.h"

namespace kestrel {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, QuantCompute qc, bool pin)
      : pool_(threads, pin), scratch_(pool_.size()), quant_compute_(qc) {
    KLOG_DEBUG("linear kernels at {}, in order of preference:{}", cpu::linear_isa(),
               cpu::describe_linear_kernels());
  }
  std::string name() const override {
    return fmt::format("cpu ({} threads, {}, {} quantized matmuls)", pool_.size(),
                       cpu::linear_isa(), quant_compute_ == QuantCompute::kInt8 ? "int8" : "f32");
  }
  Workspace& workspace() override { return workspace_; }
  void prepare_weight(LinearWeight& w, DType act, const std::string& name) override {
    if (w.plan != nullptr) return;
    std::unique_ptr<cpu::CpuLinearPlan> plan = cpu::make_linear_plan(w.w, quant_compute_, act);
    if (plan == nullptr) return;  // linear() names the dtype it cannot multiply
    KLOG_DEBUG("linear plan: {} {} [{}, {}] → {}", name, dtype_name(w.w.dtype), w.rows(), w.cols(),
               plan->describe());
    w.plan = plans_.emplace_back(std::move(plan)).get();
  }
  void linear(const LinearWeight& w, const float* x, int64_t m, float* y) override {
    cpu::linear(w, x, m, y, pool_, quant_compute_, &scratch_);
    if (w.bias != nullptr) add_bias(y, w.bias, m, w.rows());
  }
  void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m) override {
    cpu::linear_group(jobs, x, m, pool_, quant_compute_, &scratch_);
    for (const LinearJob& j : jobs)
      if (j.w->bias != nullptr) add_bias(j.y, j.w->bias, m, j.w->rows());
  }
  void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* y,
                DType act) override {
    pool_.parallel_for(rows, 4, [&](int64_t b, int64_t e) {
      cpu::rms_norm(x + b * dim, w, eps, e - b, dim, y + b * dim, act);
    });
  }
  void clamp(float* x, int64_t n, float lo, float hi) override {
    pool_.parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] = std::min(std::max(x[i], lo), hi);
    });
  }
  void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t rows,
                  int64_t dim, float* y, DType act) override {
    pool_.parallel_for(rows, 16, [&](int64_t b0, int64_t e) {
      cpu::layer_norm(x + b0 * dim, w, b, eps, e - b0, dim, y + b0 * dim, act);
    });
  }
  void add_rms_norm(float* x, const float* y, const float* w, float eps, int64_t rows, int64_t dim,
                    float* out, DType act) override {
    pool_.parallel_for(rows, 4, [&](int64_t b, int64_t e) {
      cpu::add_rms_norm(x + b * dim, y + b * dim, w, eps, e - b, dim, out + b * dim, act);
    });
  }
  void silu_mul(const float* gate, const float* up, float* out, int64_t n, DType act) override {
    const bool wide = cpu::avx512_selected();
    pool_.parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      if (!wide || !cpu::silu_mul_avx512(gate + b, up + b, out + b, e - b, act))
        cpu::silu_mul(gate + b, up + b, out + b, e - b, act);
    });
  }
  void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n,
                     DType act) override {
    pool_.parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      cpu::gelu_tanh_mul(gate + b, up + b, out + b, e - b, act);
    });
  }
  // A request's rows depend on each other (its drafts, its generator); requests do not.
  void sample(std::span<const SampleGroup> groups, std::span<GroupSamples> out) override {
    KCHECK(groups.size() == out.size(), "{} sample groups, {} outputs", groups.size(), out.size());
    pool_.parallel_for(int64_t(groups.size()), 1, [&](int64_t b, int64_t e, int thread) {
      for (int64_t i = b; i < e; ++i)
        cpu::sample_group(groups[size_t(i)], out[size_t(i)], &scratch_[thread]);
    });
  }
  void score_tokens(const float* logits, int64_t rows, int64_t vocab, const int32_t* tokens,
                    int top_n, TokenLogprobs* out) override {
    pool_.parallel_for(rows, 4, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        out[r] = cpu::score_token(std::span<const float>(logits + r * vocab, size_t(vocab)),
                                  tokens[r], top_n);
    });
  }
  // The small element-wise steps run on every thread too: left to the calling thread, the
  // workers wait through them on every layer of a batched decode step.
  void add_inplace(float* y, const float* x, int64_t n) override {
    pool_.parallel_for(n, 1 << 13,
                       [&](int64_t b, int64_t e) { cpu::add_inplace(y + b, x + b, e - b); });
  }
  void add_bias(float* y, const float* bias, int64_t rows, int64_t n) override {
    cpu::add_bias(y, bias, rows, n);
  }
  void scale(float* x, int64_t n, float f, DType act) override {
    // Split in whole vectors, as round_to below.
    pool_.parallel_for((n + 7) / 8, 1 << 10, [&](int64_t b, int64_t e) {
      cpu::scale(x + 8 * b, std::min(n, 8 * e) - 8 * b, f, act);
    });
  }
  float max_abs(const float* x, int64_t n) override {
    // One partial maximum per chunk of 4,096 values, then the maximum of those.
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<float> part(size_t(std::max<int64_t>(chunks, 1)), 0.0f);
    pool_.parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c)
        part[size_t(c)] = cpu::max_abs(x + c * kChunk, std::min(kChunk, n - c * kChunk));
    });
    return cpu::max_abs(part.data(), int64_t(part.size()));
  }
  void softcap(float* x, int64_t n, float cap, DType act) override {
    pool_.parallel_for(n, 4096,
                       [&](int64_t b, int64_t e) { cpu::softcap(x + b, e - b, cap, act); });
  }
  void sigmoid_mul(float* x, const float* gate, int64_t rows, int64_t dim, int64_t gate_dim,
                   DType act) override {
    KCHECK(gate_dim == 1 || gate_dim == dim, "sigmoid_mul: {} gates for rows of {}", gate_dim, dim);
    pool_.parallel_for(rows, 4096 / std::max<int64_t>(dim, 1) + 1, [&](int64_t b, int64_t e) {
      cpu::sigmoid_mul(x + b * dim, gate + b * gate_dim, e - b, dim, gate_dim, act);
    });
  }
  void copy_rows(std::span<const RowCopy> copies) override {
    // The copies' rows form one range split over the threads.
    int64_t rows = 0, floats = 0;
    for (const RowCopy& c : copies) {
      rows += c.rows;
      floats += c.rows * c.blocks * c.width;
    }
    const int64_t per_row = floats / std::max<int64_t>(rows, 1);
    pool_.parallel_for(rows, (1 << 13) / std::max<int64_t>(per_row, 1) + 1,
                       [&](int64_t b, int64_t e) {
                         int64_t base = 0;
                         for (const RowCopy& c : copies) {
                           const int64_t r0 = std::max(b - base, int64_t(0));
                           const int64_t r1 = std::min(e - base, c.rows);
                           if (r0 < r1) cpu::copy_rows(c, r0, r1);
                           base += c.rows;
                         }
                       });
  }
  void round_to(DType dt, float* x, int64_t n) override {
    if (dt == DType::F32) return;
    // Split in whole vectors so every element takes the same (vector) path whatever the split.
    const bool wide = cpu::avx512_selected();
    pool_.parallel_for((n + 7) / 8, 1 << 11, [&](int64_t b, int64_t e) {
      float* p = x + 8 * b;
      const int64_t len = std::min(n, 8 * e) - 8 * b;
      if (!wide || !cpu::round_to_avx512(dt, p, len)) cpu::round_to(dt, p, len);
    });
  }
  void embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    cpu::embedding(table, ids, n, out);
  }
  void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
            const RopeParams& p) override {
    pool_.parallel_for(n_tokens, 4, [&](int64_t b, int64_t e, int thread) {
      cpu::apply_rope(x + b * n_heads * head_dim, e - b, n_heads, head_dim, positions + b, p,
                      &scratch_[thread]);
    });
  }
  void write_kv(const KVLayer& cache, const float* k, const float* v, const AttentionBatch& batch,
                const RopeParams* rope_k) override {
    // Tokens split over the threads: each range is the batch view shifted to its first token
    // (write_kv reads only num_tokens, slot_mapping and positions).
    const int64_t row = int64_t(cache.num_kv_heads) * cache.head_dim;
    pool_.parallel_for(batch.num_tokens, 8, [&](int64_t b, int64_t e, int thread) {
      AttentionBatch part = batch;
      part.num_tokens = e - b;
      part.slot_mapping = batch.slot_mapping + b;
      part.positions = batch.positions + b;
      cpu::write_kv(cache, k + b * row, v + b * row, part, rope_k, &scratch_[thread]);
    });
  }
  void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                       int num_heads, float scale, float* out, DType act) override {
    cpu::paged_attention(q, cache, batch, num_heads, scale, out, pool_, act, &scratch_);
  }
  void write_mla_cache(const MlaCacheLayer& cache, const float* latent, const float* k_rope,
                       const AttentionBatch& batch) override {
    cpu::write_mla_cache(cache, latent, k_rope, batch);
  }
  void moe_route(const float* logits, int64_t T, const MoeRouting& routing, int32_t* ids,
                 float* weights) override {
    cpu::moe_route(logits, T, routing, ids, weights, pool_, &scratch_);
  }
  void moe_permute(const float* x, int64_t T, int64_t H, const int32_t* ids, int k, int E,
                   MoePermutation& perm, float* permuted) override {
    cpu::moe_permute(x, T, H, ids, k, E, perm, permuted, pool_);
  }
  void moe_combine(const float* expert_out, const MoePermutation& perm, const float* weights,
                   int64_t T, int k, int64_t H, bool round_each, DType act, float* out) override {
    cpu::moe_combine(expert_out, perm, weights, T, k, H, round_each, act, out, pool_);
  }
  void causal_conv1d(const CausalConv1d& conv, const RecurrentBatch& batch) override {
    cpu::causal_conv1d(conv, batch, pool_);
  }
  void gated_delta_rule(const GatedDeltaRule& rule, const RecurrentBatch& batch) override {
    cpu::gated_delta_rule(rule, batch, pool_, scratch_);
  }
  void gated_rms_norm(float* x, const float* z, const float* w, float eps, int64_t rows,
                      int64_t dim, DType act) override {
    pool_.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
      cpu::gated_rms_norm(x + b * dim, z + b * dim, w, eps, e - b, dim, act);
    });
  }
  void mla_attention(const float* q_lat, const float* q_rope, const MlaCacheLayer& cache,
                     const AttentionBatch& batch, int num_heads, float scale, float* out,
                     DType act) override {
    cpu::mla_attention(q_lat, q_rope, cache, batch, num_heads, scale, out, pool_, act, &scratch_);
  }
  void hc_coefficients(const HyperConnection& hc, const float* x, int64_t T, int64_t hidden,
                       float* pre, float* post, float* comb) override {
    pool_.parallel_for(T, 4, [&](int64_t b, int64_t e) {
      const int64_t n = hc.streams;
      cpu::hc_coefficients(hc, x + b * n * hidden, e - b, hidden, pre + b * n, post + b * n,
                           comb + b * n * n);
    });
  }
  void hc_collapse(const float* x, const float* pre, int64_t T, int n, int64_t hidden, float* out,
                   DType act) override {
    pool_.parallel_for(T, 16, [&](int64_t b, int64_t e) {
      cpu::hc_collapse(x + b * n * hidden, pre + b * n, e - b, n, hidden, out + b * hidden, act);
    });
  }
  void hc_expand(float* x, const float* y, const float* post, const float* comb, int64_t T, int n,
                 int64_t hidden, DType act) override {
    pool_.parallel_for(T, 16, [&](int64_t b, int64_t e) {
      cpu::hc_expand(x + b * n * hidden, y + b * hidden, post + b * n, comb + b * n * n, e - b, n,
                     hidden, act);
    });
  }
  void write_indexer_keys(const MlaCacheLayer& cache, const float* keys,
                          const AttentionBatch& batch) override {
    cpu::write_indexer_keys(cache, keys, batch);
  }
  void indexer_top_k(const float* q, const float* w, const MlaCacheLayer& cache,
                     const AttentionBatch& batch, int num_heads, float scale, int top_k,
                     int32_t* selected) override {
    cpu::indexer_top_k(q, w, cache, batch, num_heads, scale, top_k, selected, pool_, scratch_);
  }

 private:
  ThreadPool pool_;
  cpu::ThreadScratch scratch_;  // the kernels' per-thread scratch, one arena per pool thread
  QuantCompute quant_compute_;
  Workspace workspace_;
  // The plans prepare_weight made (and their packed copies). Written while the model loads, on
  // the loading thread, before any forward pass reads them.
  std::vector<std::unique_ptr<cpu::CpuLinearPlan>> plans_;
};

}  // namespace

Status cap_cpu_isa(const std::string& isa) {
  if (isa != "auto" && isa != "avx512" && isa != "avxvnni" && isa != "avx2" && isa != "scalar")
    return make_error("CPU ISA '{}': one of auto, avx512, avxvnni, avx2, scalar", isa);
  cpu::set_linear_isa(isa.c_str());
  return Status::Ok();
}

void enable_cpu_amx(bool on) {
  cpu::set_packed_amx(on);
}

void enable_cpu_amx_bf16(bool on) {
  cpu::set_amx_bf16(on);
}

std::unique_ptr<Backend> make_cpu_backend(int threads, QuantCompute quant_compute,
                                          bool pin_threads) {
  return std::make_unique<CpuBackend>(threads, quant_compute, pin_threads);
}

}  // namespace kestrel
