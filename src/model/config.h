// model/config.h — ModelConfig (architecture hyper-parameters) and generation defaults,
// read from config.json / generation_config.json or from GGUF metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kestrel {

struct ModelSlimDescription;

enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3, kYarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn: original_max_position_embeddings (0 = use max_position_embeddings)
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;
  double mscale = 0.0;          // 0 = unset
  double mscale_all_dim = 0.0;  // 0 = unset
  bool truncate = true;
};

// Mixture-of-experts FFN (Qwen3-MoE, DeepSeek-V3); num_experts == 0 in dense models.
struct MoeConfig {
  enum class Router {
    kSoftmaxTopK,     // Qwen3-MoE: softmax over all experts, top-k
    kGroupedSigmoid,  // DeepSeek-V3 noaux_tc: sigmoid + selection bias, group-limited top-k
    kSqrtSoftplus,    // DeepSeek-V4: sqrt(softplus) + selection bias, top-k (or hash routing)
  };
  int64_t num_experts = 0;  // routed experts
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t num_shared_experts = 0;  // DeepSeek: one SwiGLU of this many experts' width, every token
  // Qwen3-Next / Qwen3.5: one shared SwiGLU of this width, scaled per token by
  // sigmoid(shared_expert_gate · x); 0: none.
  int64_t shared_expert_intermediate_size = 0;
  // The shared SwiGLU's width, whichever of the two the model has (0: none).
  int64_t shared_expert_width() const {
    return num_shared_experts > 0 ? num_shared_experts * moe_intermediate_size
                                  : shared_expert_intermediate_size;
  }
  Router router = Router::kSoftmaxTopK;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  // Which layers are sparse: Qwen3-MoE's decoder_sparse_step and mlp_only_layers, DeepSeek's
  // first_k_dense_replace.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t first_k_dense_replace = 0;
  // DeepSeek-V4: the layers whose experts are picked by token id (tid2eid), not by score.
  std::vector<bool> hash_layers;
  // DeepSeek-V4: the experts' and shared expert's gate clamped to ≤ limit, up to ±limit (0: none).
  double swiglu_limit = 0.0;

  bool is_moe_layer(int64_t layer) const;
  bool is_hash_layer(int64_t layer) const {
    return layer >= 0 && size_t(layer) < hash_layers.size() && hash_layers[size_t(layer)];
  }
};

// Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank == 0 in other models.
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
  // Values one token keeps per layer in the latent cache.
  int64_t cache_width() const { return kv_lora_rank + qk_rope_head_dim; }
};

// DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention): each query attends only to the
// top_k earlier tokens its indexer scores highest; top_k == 0 in other models.
struct SparseIndexerConfig {
  int64_t num_heads = 0;  // index_n_heads
  int64_t head_dim = 0;   // index_head_dim: one key of this width per token per layer
  int64_t top_k = 0;      // index_topk
  bool enabled() const { return top_k > 0; }
};

// DeepSeek-V4's attention and residual (deepseek-v4-family.md §1.3, §2.4, §2.7): shared-KV MQA
// (one KV head, K = V) with a sliding window on every layer, compressed attention (CSA, HCA) on
// some, a low-rank query, a grouped low-rank output projection, per-head sinks, and mHC.
// hc_mult == 0 in other models.
struct DeepseekV4Config {
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t hc_mult = 0;  // residual streams
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  // Per layer: 0 a window-only layer, else the compression ratio of its compressed attention
  // (4: CSA, 128: HCA in the released models).
  std::vector<int32_t> compress_ratios;
  double compress_rope_theta = 160000.0;
  RopeScaling compress_rope_scaling;  // YaRN of the compressed layers
  bool enabled() const { return hc_mult > 0; }
};

// Gated DeltaNet linear-attention layers (Qwen3-Next, Qwen3.5; models.md 5.3): num_value_heads
// == 0 in models without them.
struct LinearAttentionConfig {
  int64_t conv_kernel = 4;
  int64_t key_head_dim = 128;
  int64_t value_head_dim = 128;
  int64_t num_key_heads = 16;
  int64_t num_value_heads = 0;
  // Qwen3-Next's in_proj_qkvz / in_proj_ba grouped by key head; false: Qwen3.5's flat
  // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
  bool fused_projections = false;
  bool enabled() const { return num_value_heads > 0; }
  int64_t value_heads_per_key_head() const { return num_value_heads / num_key_heads; }
  int64_t key_dim() const { return num_key_heads * key_head_dim; }
  int64_t value_dim() const { return num_value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  // f32 values of one sequence's state in one layer: the last conv_kernel - 1 conv inputs per
  // channel, then the [value heads, key_head_dim, value_head_dim] recurrent matrices.
  int64_t conv_state_floats() const { return conv_dim() * (conv_kernel - 1); }
  int64_t state_floats() const {
    return conv_state_floats() + num_value_heads * key_head_dim * value_head_dim;
  }
};

// quantization_config of FP8 block-quantized checkpoints (DeepSeek's format).
struct Fp8WeightConfig {
  bool enabled = false;
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

// compressed-tensors int8 W8A8 (llm-compressor's checkpoints, quant_method "compressed-tensors",
// format "int-quantized"): int8 weights with a symmetric scale per row (or one per tensor) and
// int8 activations, per token (dynamic) or per tensor (static, input_scale and an optional
// input_zero_point). Which linears: those whose weight is stored int8 (the rest, `ignore`d, keep
// their float weights).
// A kv_cache_scheme of 8-bit float, static, symmetric, per tensor or per attention head says the
// checkpoint carries self_attn.k_scale / v_scale for an FP8 KV cache (--kv-cache-dtype fp8).
struct CompressedTensorsConfig {
  bool enabled = false;
  bool dynamic_activations = true;  // per token; false: static per tensor
  bool fp8_kv_scales = false;       // kv_cache_scheme
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t rope_dim = 0;  // rotated width per head; defaults to head_dim
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q/k/v biases (Qwen2: always)
  bool qk_norm = false;         // per-head q/k RMSNorm (Qwen3)
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  // Pairing of rotated dims: false = neox (rotate_half), true = interleaved (GGUF llama layout).
  bool rope_interleaved = false;
  std::string torch_dtype;  // as declared in config.json ("bfloat16", "float32", ...)
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  MoeConfig moe;
  MlaConfig mla;
  SparseIndexerConfig indexer;
  DeepseekV4Config dsv4;
  // Values one token keeps per layer in a latent cache: MLA's latent and rope key, then the
  // indexer's key when the model has one (its rows share the latents' blocks and lifetime).
  int64_t latent_cache_width() const {
    return mla.cache_width() + (indexer.enabled() ? indexer.head_dim : 0);
  }
  Fp8WeightConfig fp8;
  // An msModelSlim checkpoint's description of its quantized tensors (model/modelslim.h), set by
  // the loader; null for other checkpoints.
  std::shared_ptr<const ModelSlimDescription> modelslim;
  CompressedTensorsConfig compressed_tensors;
  // MTP modules: DeepSeek's after the main layers, Qwen3-Next's and Qwen3.5's under mtp.
  int64_t num_nextn_predict_layers = 0;
  // Qwen3-Next / Qwen3.5: q_proj holds [query | gate] per head and the attention output is
  // multiplied by sigmoid(gate) before o_proj.
  bool attn_output_gate = false;
  // Zero-centred RMSNorms (Qwen3-Next, Qwen3.5, Gemma): the scale is 1 + weight, multiplied in
  // f32 before one rounding (Llama's form rounds the normed row, then multiplies).
  bool norm_offset = false;
  // The stored norm weights already hold the 1 (llama.cpp's GGUF converter adds it).
  bool norm_weights_include_offset = false;
  // Gemma3: attention scores are scaled by query_pre_attn_scalar^-0.5 (0: head_dim^-0.5);
  // logits become c · tanh(logits / c) with c = final_logit_softcapping (0: none); the embedding
  // rows are multiplied by sqrt(hidden_size); each block also norms its attention and FFN outputs
  // (post_attention_layernorm, post_feedforward_layernorm; the FFN's input norm is then
  // pre_feedforward_layernorm); sliding-window layers rotate with base rope_local_theta and no
  // scaling (0: as the full layers).
  double query_pre_attn_scalar = 0.0;
  double final_logit_softcapping = 0.0;
  bool scale_embeddings = false;
  bool sandwich_norms = false;
  double rope_local_theta = 0.0;
  // Where the decoder's tensors sit: "model." or, in vision-language checkpoints,
  // "model.language_model." (lm_head stays at the top).
  std::string weight_prefix = "model.";
  LinearAttentionConfig linear;
  // Per hidden layer, whether it is a linear-attention layer; empty when none is.
  std::vector<bool> layer_linear;
  bool is_linear_layer(int64_t layer) const {
    return layer >= 0 && size_t(layer) < layer_linear.size() && layer_linear[size_t(layer)];
  }
  // Per hidden layer, the sliding window of its attention (a query at p sees keys p - W < j ≤
  // p), 0 for full attention; empty when no layer has one.
  std::vector<int32_t> layer_sliding_window;

  int32_t sliding_window(int64_t layer) const;

  // Checks required fields and divisibility; fills defaults (head_dim, rope_dim, kv heads).
  Status finalize();
};

// Sampling defaults from generation_config.json (absent fields stay unset).
struct GenerationDefaults {
  std::vector<int64_t> eos_token_ids;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Parses config.json text; an unknown architecture is not an error here (the model factory
// decides).
Expected<ModelConfig> parse_config_json(const std::string& text);
Expected<ModelConfig> load_config_json(const std::string& path);
Expected<GenerationDefaults> parse_generation_config_json(const std::string& text);

class GgufFile;
// Builds a ModelConfig from GGUF metadata (general.architecture = llama | qwen2 | qwen3).
Expected<ModelConfig> config_from_gguf(const GgufFile& gguf);

}  // namespace kestrel
