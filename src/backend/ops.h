// backend/ops.h — the parameter structs of the backend's ops (backend/backend.h), neutral to
// where they run: plain views of memory in the backend's space (host memory on the CPU, device
// memory on a GPU) and the numbers that configure each op. Every backend reads the same structs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/linear_weight.h"
#include "sampling/sampling_params.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace kestrel {

// How quantized weights meet the activations.
enum class QuantCompute {
  kInt8,  // activations quantized per block to Q8_0/Q8_1/Q8_K, integer dot products (llama.cpp)
  kF32,   // each weight block dequantized to f32 and multiplied with the f32 activations
};

// One weight of a linear_group: y[m, N] = x[m, K] · wᵀ.
struct LinearJob {
  const LinearWeight* w;
  float* y;
};

// Rotary position embedding of [tokens, heads, head_dim] rows.
struct RopeParams {
  const float* inv_freq = nullptr;  // rot_dim / 2 frequencies
  int rot_dim = 0;                  // rotated width at the start of each head (≤ head_dim)
  float attention_factor = 1.0f;    // multiplies cos and sin (YaRN)
  bool interleaved = false;         // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  // BF16/F16: cos, sin, both products and the sum are rounded to that dtype, as a model with
  // activations of that dtype computes them.
  DType act = DType::F32;
};

// One layer's paged K/V cache: [num_blocks, num_kv_heads, block_size, head_dim] for K and for
// V, in f32, f16 or bf16; a sequence's token at position p lives in block
// block_table[p / block_size], row p % block_size of each head. Heads are outside the rows so
// that one head's keys of a block are one contiguous run: attention reads a head at a time.
struct KVLayer {
  void* k = nullptr;
  void* v = nullptr;
  // F32, F16, BF16, or a quantized cache (backend/cpu/cache_rows.h): F8_E4M3 / F8_E5M2
  // (--kv-cache-dtype fp8*), I8 (C8) or MXFP8 (E4M3 K with per-32 scales in each row, E4M3 V
  // with v_scale).
  DType dtype = DType::F32;
  int64_t num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  // A quantized cache's per-channel dequantization, [num_kv_heads · head_dim] each (null: scale
  // 1, offset 0): x = (code − offset) · scale. The layer's owner keeps them alive.
  const float* k_scale = nullptr;
  const float* k_offset = nullptr;
  const float* v_scale = nullptr;
  const float* v_offset = nullptr;
};

// Whether a KV cache of `t` holds codes with scales rather than values (FP8, C8 int8, MXFP8).
inline bool quantized_kv_cache(DType t) {
  return t == DType::F8_E4M3 || t == DType::F8_E5M2 || t == DType::I8 || t == DType::MXFP8;
}

// Where slot `slot` (block · block_size + row) of head `head` starts, in rows (of head_dim
// values) from k or v.
inline int64_t kv_row_index(const KVLayer& c, int64_t slot, int head) {
  const int64_t block = slot / c.block_size, row = slot % c.block_size;
  return (block * c.num_kv_heads + head) * c.block_size + row;
}

// One layer's MLA cache of latents: [num_blocks, block_size, latent_dim + rope_dim], each row
// [c | kpe] (the normalized latent and the roped shared key), paged like KVLayer.
struct MlaCacheLayer {
  void* data = nullptr;
  DType dtype = DType::F32;  // F32, F16, BF16, or F8_E4M3 / F8_E5M2 codes of x / scale
  int64_t num_blocks = 0;
  int block_size = 16;
  int latent_dim = 0;
  int rope_dim = 0;
  float scale = 1.0f;  // an FP8 cache's per-tensor scale
  // DeepSeek-V3.2: each row ends with the token's indexer key (0: no indexer). A row is
  // [latent | rope key | indexer key], latent_dim + rope_dim + index_dim values.
  int index_dim = 0;
  int64_t row_elems() const { return int64_t(latent_dim) + rope_dim + index_dim; }
};

// The attention view of a flat batch of tokens from several sequences.
struct AttentionBatch {
  int64_t num_tokens = 0;
  int num_seqs = 0;
  const int32_t* positions = nullptr;        // [num_tokens]
  const int64_t* slot_mapping = nullptr;     // [num_tokens] block * block_size + row
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] tokens of seq s: [qsl[s], qsl[s+1])
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  // > 0: a query at position p attends only to keys p - sliding_window < j <= p (Mistral's and
  // Qwen2's sliding-window layers); their table entries before that may be the null block.
  int sliding_window = 0;
  // DeepSeek-V3.2's sparse attention (MLA only): token t attends only to the key positions in
  // selected_keys[t · keys_per_token, (t + 1) · keys_per_token), −1 entries unused, as
  // Backend::indexer_top_k writes them; null: to every causal key.
  const int32_t* selected_keys = nullptr;
  int keys_per_token = 0;
  // DeepSeek-V4's attention sinks (paged attention): one logit per query head that joins each
  // softmax without a value, so the probabilities of the keys sum to less than one; null: none.
  const float* sinks = nullptr;
};

// One strided copy of Backend::copy_rows: for each row r < rows and block b < blocks, the
// `width` floats at src + s·src_row + b·src_block go to dst + r·dst_row + b·dst_block, where s is
// r, or src_rows[r] for a gather. Strides are in floats. Splitting a projection's output into its
// parts, regrouping heads and picking rows are all such copies.
struct RowCopy {
  const float* src = nullptr;
  float* dst = nullptr;
  int64_t rows = 0;
  int64_t width = 0;
  int64_t blocks = 1;
  int64_t src_row = 0, dst_row = 0;
  int64_t src_block = 0, dst_block = 0;
  const int32_t* src_rows = nullptr;  // [rows]: which source row each row reads; null: row r
};

// Where a recurrent layer keeps its sequences' states: num_slots slots, slot i's state at
// base + i·slot_stride floats (what a slot holds is the op's: CausalConv1d, GatedDeltaRule).
struct StateSlots {
  float* base = nullptr;
  int64_t slot_stride = 0;
  int32_t num_slots = 0;
  float* at(int32_t slot) const { return base + int64_t(slot) * slot_stride; }
};

// The sequences of a batch as a recurrent layer (linear attention) runs them: each over its
// tokens in order, from the state in its slot — or from zeros when its first token is at
// position 0 — leaving the state after its last token in the slot. A sequence's results do not
// depend on the rest of the batch or on how its tokens are split into steps.
struct RecurrentBatch {
  int num_seqs = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] tokens of seq s: [qsl[s], qsl[s+1])
  const int32_t* positions = nullptr;        // [num_tokens]
  const int32_t* state_slots = nullptr;      // [num_seqs]
  // [num_seqs] or null: a slot that also gets the sequence's state before its last token (-1:
  // none), which a PD decode instance continues from; a one-token sequence holds the state it
  // starts from.
  const int32_t* hold_slots = nullptr;
  // [num_seqs] each, or null: the states after the sequence's last n = snapshot_counts[s] tokens
  // before its final one also go to slots snapshot_slots[s] + 0 .. n − 1 in token order (draft
  // snapshots, which a rejected draft's state is restored from).
  const int32_t* snapshot_counts = nullptr;
  const int32_t* snapshot_slots = nullptr;
};

// Backend::causal_conv1d: y = r(silu(r(conv))), r rounding to act, where per sequence and
// channel c the causal depthwise convolution of its inputs is
// conv[t, c] = Σ_i weight[c, i]·in[t − kernel + 1 + i, c], taps oldest first, the inputs before
// the sequence's first token of the step coming from the slot's state.
struct CausalConv1d {
  const float* x = nullptr;       // [num_tokens, channels]
  const float* weight = nullptr;  // [channels, kernel]
  int64_t channels = 0;
  int kernel = 0;      // at least 2
  float* y = nullptr;  // [num_tokens, channels]
  StateSlots states;   // per slot [channels, kernel − 1]: the last inputs, oldest first
  DType act = DType::F32;
};

// Backend::gated_delta_rule, per sequence and value head j (reading key head
// j / (value_heads / key_heads)), token by token over a [key_dim, value_dim] state S in f32:
// q and k L2-normed (x / sqrt(Σx² + 1e-6)) and q divided by sqrt(key_dim), β = r(σ(b)),
// α = exp(decay_rate·softplus(a + dt_bias)); S = α·S; u = β·(v − Sᵀk); S = S + k·uᵀ;
// out = r(Sᵀq), r rounding to act. softplus is torch's (threshold 20).
struct GatedDeltaRule {
  // Token t's q and k [key_heads, key_dim] and v [value_heads, value_dim] at q, k and v
  // + t·stride.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t stride = 0;
  const float* b = nullptr;           // [num_tokens, value_heads]
  const float* a = nullptr;           // [num_tokens, value_heads]
  const float* dt_bias = nullptr;     // [value_heads]
  const float* decay_rate = nullptr;  // [value_heads], −exp(A_log)
  int key_heads = 0;
  int value_heads = 0;
  int64_t key_dim = 0;
  int64_t value_dim = 0;
  float* out = nullptr;  // [num_tokens, value_heads, value_dim]
  StateSlots states;     // per slot [value_heads, key_dim, value_dim]
  DType act = DType::F32;
};

// An MoE router over logits [T, E]: per token, top_k expert ids and weights, in descending
// selection score (ties to the lower expert id).
struct MoeRouting {
  enum class Kind {
    // Qwen3-MoE: softmax over all experts, the top_k largest, renormalized with norm_topk_prob.
    kSoftmaxTopK,
    // DeepSeek-V3 "noaux_tc": sigmoid, + bias for selection, the topk_group best of n_group
    // groups (a group's score: its two best), top_k among their experts; weights unbiased,
    // renormalized with norm_topk_prob, times routed_scaling_factor.
    kGroupedSigmoid,
    // DeepSeek-V4: s = sqrt(softplus(logit)), the top_k of s + bias (no groups), or with
    // `given_ids` the experts already in ids (hash routing: tid2eid of the token); weights s of
    // those / (their sum + 1e-20), times routed_scaling_factor. With `act` BF16/F16 every step
    // rounds to it, as the reference's router runs in the model's dtype.
    kSqrtSoftplus,
  };
  Kind kind = Kind::kSoftmaxTopK;
  int num_experts = 0;
  int top_k = 0;
  bool norm_topk_prob = false;
  int n_group = 1;
  int topk_group = 1;
  float routed_scaling_factor = 1.0f;
  const float* bias = nullptr;  // [num_experts] or null (kGroupedSigmoid, kSqrtSoftplus)
  bool given_ids = false;       // kSqrtSoftplus: ids hold each token's experts already
  DType act = DType::F32;       // kSqrtSoftplus: the router's dtype
};

// DeepSeek-V4's manifold-constrained hyper-connections (mHC) at one sublayer site: the residual
// is `streams` rows of the hidden size per token, mixed by coefficients computed from them.
struct HyperConnection {
  const float* fn = nullptr;     // [(2 + streams) · streams, streams · hidden] f32
  const float* base = nullptr;   // [(2 + streams) · streams]
  const float* scale = nullptr;  // [3]: the pre, post and comb parts' scales
  int streams = 4;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;   // added to pre and inside Sinkhorn
  float rms_eps = 1e-6f;  // the RMS of the flattened streams (the model's rms_norm_eps)
};

// The T·k routed (token, slot) pairs in expert order, as moe_permute lays out their rows.
struct MoePermutation {
  std::vector<int32_t> offsets;  // [E + 1]: rows of expert e are [offsets[e], offsets[e+1])
  std::vector<int32_t> token;    // [T·k] token of each permuted row, ascending within an expert
  std::vector<int32_t> row_of_slot;  // [T·k] permuted row of pair t·k + j
};

// One request's rows of a sampling step: the row of its last known token, then one row per
// draft token. Row i is sampled as if drafts[0..i) had been accepted; a draft is accepted
// while it equals the token drawn for its position, and the rows after the first mismatch are
// not drawn from, so a request draws once per token it emits.
struct SampleGroup {
  float* logits = nullptr;  // (drafts.size() + 1) rows of vocab, modified in place
  int64_t vocab = 0;
  std::span<const int32_t> drafts;
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;   // the repetition penalty's tokens, with the outputs
  std::span<const int32_t> outputs;  // the penalties' tokens before row 0
  // With `masked`, the allowed tokens of the first mask_rows rows, allowed.size() / mask_rows
  // words each: bit i of word i / 64; ids past the words (all of them for no words) are
  // disallowed. Rows past mask_rows are not masked.
  bool masked = false;
  std::span<const uint64_t> allowed;
  size_t mask_rows = 1;
  SamplerRng* rng = nullptr;
};

struct GroupSamples {
  std::vector<int32_t> tokens;          // the accepted drafts, then the token drawn after them
  std::vector<TokenLogprobs> logprobs;  // one per token when params->logprobs >= 0
  bool no_token_allowed = false;        // the first row allowed no token: nothing drawn
};

}  // namespace kestrel
