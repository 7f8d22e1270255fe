// backend/backend.h — the ops table the model's forward pass is written against.
// A backend owns its compute resources (threads now; devices and streams for CUDA later). All
// pointers are in the backend's memory space; on the CPU that is host memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/ops.h"
#include "backend/workspace.h"
#include "tensor/tensor.h"

namespace kestrel {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Scratch memory for the forward pass (backend/workspace.h).
  virtual Workspace& workspace() = 0;

  // Chooses how the backend multiplies w (LinearWeight::plan: its kernel, the activation format
  // and a packed copy in the layout that kernel reads fastest), from one table per backend, and
  // logs the choice at debug level under `name`. The backend owns the plan and the copy. `act` is
  // the model's activation dtype: with BF16 activations a BF16 weight may become a bf16 GEMM
  // (activations rounded to bf16, as the reference's bf16 matmul takes them).
  virtual void prepare_weight(LinearWeight& w, DType act, const std::string& name) = 0;
  // y[m, N] = x[m, K] · W[N, K]ᵀ (+ w.bias) for weights of any supported dtype.
  virtual void linear(const LinearWeight& w, const float* x, int64_t m, float* y) = 0;
  // Several weights over the same x in one pass: activations prepared once, the output rows of
  // all weights split over the threads together (at most 8 jobs, the same K).
  virtual void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m) = 0;
  virtual void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t dim,
                        float* y, DType act) = 0;
  // y = r((x − mean) / sqrt(var + eps) · w + b) per row, mean and variance in f64, computed in
  // f32 and rounded once to act (r), as torch's LayerNorm runs on bf16 rows.
  virtual void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t rows,
                          int64_t dim, float* y, DType act) = 0;
  // x += y (rounded to act), then out = rms_norm(x): a block's residual add and the next norm.
  virtual void add_rms_norm(float* x, const float* y, const float* w, float eps, int64_t rows,
                            int64_t dim, float* out, DType act) = 0;
  // out = silu(gate)·up. With act BF16/F16, gate and up are first rounded to act, then silu(gate)
  // and the product: one pass for what the reference computes on rounded tensors.
  virtual void silu_mul(const float* gate, const float* up, float* out, int64_t n, DType act) = 0;
  // out = gelu_tanh(gate)·up (Gemma's GELU with the tanh approximation), rounded as silu_mul.
  virtual void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n,
                             DType act) = 0;
  // One step's sampling, all requests at once (ops.h, SampleGroup): masks, penalties,
  // temperature, top-k/p, min-p, a draw from each request's generator, logprobs and the
  // verification of draft tokens. out[i] is groups[i]'s.
  virtual void sample(std::span<const SampleGroup> groups, std::span<GroupSamples> out) = 0;
  // out[r] = the score of tokens[r] under logits row r ([rows, vocab]) with the top_n
  // alternatives: prompt logprobs.
  virtual void score_tokens(const float* logits, int64_t rows, int64_t vocab, const int32_t* tokens,
                            int top_n, TokenLogprobs* out) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t n) = 0;
  // The largest |x[i]| of n values (0 for none; NaNs are passed over): what calibrating an FP8
  // KV cache's scales reads. A maximum does not depend on the order, so neither does this.
  virtual float max_abs(const float* x, int64_t n) = 0;
  // x = min(max(x, lo), hi) for n values (DeepSeek-V4's SwiGLU limits).
  virtual void clamp(float* x, int64_t n, float lo, float hi) = 0;
  // x = r(x·f) for n values, r rounding to act (Gemma's scaled embeddings).
  virtual void scale(float* x, int64_t n, float f, DType act) = 0;
  // x = r(c·r(tanh(r(x / c)))) with c = cap, r rounding to act: Gemma's soft-capping of logits,
  // each step rounded as the reference computes it in the activation dtype.
  virtual void softcap(float* x, int64_t n, float cap, DType act) = 0;
  // x[r, i] = r(x[r, i]·r(σ(r(g)))) for rows of dim, σ(g) = 1 / (1 + e^(−g)), r rounding to act;
  // g = gate[r, i] with gate_dim == dim (a gate per value: gated attention's output) or gate[r]
  // with gate_dim == 1 (a gate per row: Qwen's shared-expert scale).
  virtual void sigmoid_mul(float* x, const float* gate, int64_t rows, int64_t dim, int64_t gate_dim,
                           DType act) = 0;
  // Every copy of `copies` (ops.h, RowCopy) in one pass. No copy's destination may overlap
  // another's, or any source.
  virtual void copy_rows(std::span<const RowCopy> copies) = 0;
  // Rounds activations to `dt` in place (emulates bf16/f16 activation storage).
  virtual void round_to(DType dt, float* x, int64_t n) = 0;
  virtual void embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) = 0;
  virtual void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
                    const RopeParams& p) = 0;
  // Stores K and V at the batch's slots, converted to the cache dtype; with rope_k, K is rotated
  // on its way in.
  virtual void write_kv(const KVLayer& cache, const float* k, const float* v,
                        const AttentionBatch& batch, const RopeParams* rope_k = nullptr) = 0;
  virtual void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                               int num_heads, float scale, float* out, DType act) = 0;
  // MoE: routes logits [T, E] to ids and weights ([T, top_k] each).
  virtual void moe_route(const float* logits, int64_t T, const MoeRouting& routing, int32_t* ids,
                         float* weights) = 0;
  // Groups the routed pairs by expert (a stable counting sort into `perm`) and gathers their
  // input rows: permuted[r] = x[perm.token[r]], [T·k, H].
  virtual void moe_permute(const float* x, int64_t T, int64_t H, const int32_t* ids, int k, int E,
                           MoePermutation& perm, float* permuted) = 0;
  // out[t] = Σ_j weights[t, j] · expert_out[perm.row_of_slot[t·k + j]], j in order. With
  // round_each (Qwen3-MoE as transformers runs it) each weight, product and partial sum is
  // rounded to act; otherwise the sum is f32 and rounded once.
  virtual void moe_combine(const float* expert_out, const MoePermutation& perm,
                           const float* weights, int64_t T, int k, int64_t H, bool round_each,
                           DType act, float* out) = 0;
  // Linear attention (Gated DeltaNet): the convolution with its SiLU and the recurrence over a
  // batch's sequences (ops.h), each sequence's tokens in order.
  virtual void causal_conv1d(const CausalConv1d& conv, const RecurrentBatch& batch) = 0;
  virtual void gated_delta_rule(const GatedDeltaRule& rule, const RecurrentBatch& batch) = 0;
  // x[r] = r(r(r(x[r]·s)·w)·silu(z[r])) for rows of dim, s = 1 / sqrt(mean(x[r]²) + eps) (the
  // mean in f64), r rounding to act: the gated RMSNorm of the recurrence's output.
  virtual void gated_rms_norm(float* x, const float* z, const float* w, float eps, int64_t rows,
                              int64_t dim, DType act) = 0;
  // DeepSeek-V4's mHC (ops.h HyperConnection), x [T, n, hidden] the n streams, all in f32:
  // hc_coefficients: per token f = x's n·hidden values, z = (fn · f)·rsqrt(mean(f²) + rms_eps)
  //   ⊙ scale (per part) + base; pre = σ(z[0, n)) + hc_eps, post = 2σ(z[n, 2n)), comb =
  //   Sinkhorn(z[2n, 2n + n²) as n×n): row softmax + hc_eps, columns normalised, then
  //   sinkhorn_iters − 1 times rows and columns (each sum + hc_eps). pre, post [T, n], comb
  //   [T, n, n] (comb[j][k]: input stream j into output stream k).
  // hc_collapse: out [T, hidden] = r(Σ_j pre_j · x_j), the sum in f32 in stream order.
  // hc_expand: x_k = r(r(r(post_k) · y) + r(Σ_j r(comb[j][k]) · x_j)) in place, y [T, hidden]
  //   a sublayer's output; r rounds to act (nothing in f32).
  virtual void hc_coefficients(const HyperConnection& hc, const float* x, int64_t T, int64_t hidden,
                               float* pre, float* post, float* comb) = 0;
  virtual void hc_collapse(const float* x, const float* pre, int64_t T, int n, int64_t hidden,
                           float* out, DType act) = 0;
  virtual void hc_expand(float* x, const float* y, const float* post, const float* comb, int64_t T,
                         int n, int64_t hidden, DType act) = 0;
  // MLA over a latent cache, in the absorbed form: q_lat has W_UK folded in.
  virtual void write_mla_cache(const MlaCacheLayer& cache, const float* latent, const float* k_rope,
                               const AttentionBatch& batch) = 0;
  virtual void mla_attention(const float* q_lat, const float* q_rope, const MlaCacheLayer& cache,
                             const AttentionBatch& batch, int num_heads, float scale, float* out,
                             DType act) = 0;
  // DeepSeek-V3.2's lightning indexer. write_indexer_keys stores each batch token's key
  // (cache.index_dim values) at the end of its latent-cache row. indexer_top_k gives each batch
  // token t at position p the top_k keys j ≤ p of its sequence with the highest
  //   I(t, j) = Σ_h w[t, h] · relu(scale · q[t, h] · key_j)
  // (q [T, num_heads, index_dim], w [T, num_heads]; dot products in f32), ties to the earlier
  // key, written to selected[t · top_k, (t + 1) · top_k) in ascending order; a token with no
  // more than top_k keys gets all of them, then −1s. Scores depend only on the token and the
  // key, so the choice is the same whatever the batch or its chunks.
  virtual void write_indexer_keys(const MlaCacheLayer& cache, const float* keys,
                                  const AttentionBatch& batch) = 0;
  virtual void indexer_top_k(const float* q, const float* w, const MlaCacheLayer& cache,
                             const AttentionBatch& batch, int num_heads, float scale, int top_k,
                             int32_t* selected) = 0;
};

// Process-wide choices of the CPU kernels, made before a backend runs (the CLI takes them from
// KESTREL_CPU_ISA, KESTREL_CPU_AMX and KESTREL_CPU_AMX_BF16): the best ISA this CPU runs, capped
// at `isa` ("auto", "avx512", "avx2", "scalar"; another name is an error), so one machine can run
// another CPU's path; whether batches may use AMX int8 tiles where the CPU has them (the same bits
// either way); and whether BF16 models may use the AMX-BF16 tiles (off by default: faster
// prefill, but another arithmetic, so the bits differ from every other CPU's).
Status cap_cpu_isa(const std::string& isa);
void enable_cpu_amx(bool on);
void enable_cpu_amx_bf16(bool on);

// The CPU backend with `threads` compute threads (0 = all cores), bound one per CPU when
// `pin_threads` (ThreadPool); `quant_compute` says how quantized weights are multiplied (see
// QuantCompute).
std::unique_ptr<Backend> make_cpu_backend(int threads,
                                          QuantCompute quant_compute = QuantCompute::kInt8,
                                          bool pin_threads = false);

}  // namespace kestrel
