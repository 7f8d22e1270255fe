#include "model/llama.h"

#include <cmath>
#include <vector>

#include "backend/cpu/quant.h"
#include "model/rope_table.h"

namespace kestrel {
namespace {

struct LayerWeights {
  Tensor q, k, v, o, gate, up, down;
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm, q_bias, k_bias, v_bias;
};

// Small vectors (norms, biases) are converted to f32 once at load.
Expected<std::vector<float>> load_vector(WeightSource& src, const std::string& name, int64_t n) {
  KASSIGN(Tensor t, src.get(name, Shape{n}));
  std::vector<float> out(n);
  cpu::dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

class LlamaModel final : public CausalLM {
 public:
  LlamaModel(const ModelConfig& cfg, DType act_dtype, DType kv_dtype, Backend& backend)
      : cfg_(cfg), act_(act_dtype), kv_dtype_(kv_dtype), be_(backend) {}

  Status load(WeightSource& src) {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
    const int64_t qd = cfg_.num_attention_heads * cfg_.head_dim;
    const int64_t kvd = cfg_.num_key_value_heads * cfg_.head_dim;
    KASSIGN(embed_, src.get("model.embed_tokens.weight", Shape{V, H}));
    if (src.has("lm_head.weight") && !cfg_.tie_word_embeddings) {
      KASSIGN(lm_head_, src.get("lm_head.weight", Shape{V, H}));
    } else {
      lm_head_ = embed_;
    }
    KASSIGN(final_norm_, load_vector(src, "model.norm.weight", H));
    layers_.resize(cfg_.num_hidden_layers);
    for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      LayerWeights& L = layers_[i];
      KASSIGN(L.attn_norm, load_vector(src, p + "input_layernorm.weight", H));
      KASSIGN(L.ffn_norm, load_vector(src, p + "post_attention_layernorm.weight", H));
      KASSIGN(L.q, src.get(p + "self_attn.q_proj.weight", Shape{qd, H}));
      KASSIGN(L.k, src.get(p + "self_attn.k_proj.weight", Shape{kvd, H}));
      KASSIGN(L.v, src.get(p + "self_attn.v_proj.weight", Shape{kvd, H}));
      KASSIGN(L.o, src.get(p + "self_attn.o_proj.weight", Shape{H, qd}));
      KASSIGN(L.gate, src.get(p + "mlp.gate_proj.weight", Shape{I, H}));
      KASSIGN(L.up, src.get(p + "mlp.up_proj.weight", Shape{I, H}));
      KASSIGN(L.down, src.get(p + "mlp.down_proj.weight", Shape{H, I}));
      if (cfg_.attention_bias) {
        KASSIGN(L.q_bias, load_vector(src, p + "self_attn.q_proj.bias", qd));
        KASSIGN(L.k_bias, load_vector(src, p + "self_attn.k_proj.bias", kvd));
        KASSIGN(L.v_bias, load_vector(src, p + "self_attn.v_proj.bias", kvd));
      }
      if (cfg_.qk_norm) {
        KASSIGN(L.q_norm, load_vector(src, p + "self_attn.q_norm.weight", cfg_.head_dim));
        KASSIGN(L.k_norm, load_vector(src, p + "self_attn.k_norm.weight", cfg_.head_dim));
      }
    }
    for (LayerWeights& L : layers_)
      for (Tensor* t : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) be_.prepare_weight(*t);
    be_.prepare_weight(lm_head_);
    rope_ = make_rope_table(cfg_, src.rope_freq_divisors());
    return Status::Ok();
  }

  const ModelConfig& config() const override { return cfg_; }
  DType kv_cache_dtype() const override { return kv_dtype_; }

  size_t weight_bytes() const override {
    size_t b = lm_head_.nbytes();
    for (const auto& L : layers_)
      b += L.q.nbytes() + L.k.nbytes() + L.v.nbytes() + L.o.nbytes() + L.gate.nbytes() +
           L.up.nbytes() + L.down.nbytes();
    return b;
  }

  void forward(const ForwardBatch& fb, KVCacheStorage& kv, float* logits) override {
    const int64_t T = int64_t(fb.token_ids.size());
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    const int nh = int(cfg_.num_attention_heads), nkv = int(cfg_.num_key_value_heads);
    const int hd = int(cfg_.head_dim);
    const int64_t qd = int64_t(nh) * hd, kvd = int64_t(nkv) * hd;
    KCHECK(fb.positions.size() == size_t(T) && fb.slot_mapping.size() == size_t(T),
           "batch arrays disagree on token count");
    ws_.ensure(T, H, I, qd, kvd);

    cpu::AttentionBatch ab;
    ab.num_tokens = T;
    ab.num_seqs = int(fb.query_start_loc.size()) - 1;
    ab.positions = fb.positions.data();
    ab.slot_mapping = fb.slot_mapping.data();
    ab.query_start_loc = fb.query_start_loc.data();
    ab.block_tables = fb.block_tables.data();
    ab.max_blocks_per_seq = fb.max_blocks_per_seq;

    cpu::RopeParams rp;
    rp.inv_freq = rope_.inv_freq.data();
    rp.rot_dim = rope_.rot_dim;
    rp.attention_factor = rope_.attention_factor;
    rp.interleaved = rope_.interleaved;
    rp.act = act_;
    const float eps = float(cfg_.rms_norm_eps);
    const float scale = 1.0f / std::sqrt(float(hd));

    float* x = ws_.x.data();
    float* h = ws_.h.data();
    // With bf16/f16 activations every op's output is rounded, where the reference stores it.
    auto rnd = [&](float* p, int64_t n) { be_.round_to(act_, p, n); };
    be_.embedding(embed_, fb.token_ids.data(), T, x);
    rnd(x, T * H);
    for (size_t li = 0; li < layers_.size(); ++li) {
      const LayerWeights& L = layers_[li];
      be_.rms_norm(x, L.attn_norm.data(), eps, T, H, h, act_);
      float* q = ws_.q.data();
      float* k = ws_.k.data();
      float* v = ws_.v.data();
      const cpu::LinearJob qkv[3] = {{&L.q, q}, {&L.k, k}, {&L.v, v}};
      be_.linear_group(qkv, h, T);
      if (cfg_.attention_bias) {
        be_.add_bias(q, L.q_bias.data(), T, qd);
        be_.add_bias(k, L.k_bias.data(), T, kvd);
        be_.add_bias(v, L.v_bias.data(), T, kvd);
      }
      rnd(q, T * qd);
      rnd(k, T * kvd);
      rnd(v, T * kvd);
      if (cfg_.qk_norm) {
        be_.rms_norm(q, L.q_norm.data(), eps, T * nh, hd, q, act_);
        be_.rms_norm(k, L.k_norm.data(), eps, T * nkv, hd, k, act_);
      }
      be_.rope(q, T, nh, hd, fb.positions.data(), rp);
      be_.rope(k, T, nkv, hd, fb.positions.data(), rp);
      const cpu::KVLayer cache = kv.layer(int(li));
      be_.write_kv(cache, k, v, ab);
      float* attn = ws_.attn.data();
      be_.paged_attention(q, cache, ab, nh, scale, attn, act_);
      be_.linear(L.o, attn, T, h);
      rnd(h, T * H);
      be_.add_inplace(x, h, T * H);
      rnd(x, T * H);

      be_.rms_norm(x, L.ffn_norm.data(), eps, T, H, h, act_);
      float* g = ws_.gate.data();
      float* u = ws_.up.data();
      const cpu::LinearJob gate_up[2] = {{&L.gate, g}, {&L.up, u}};
      be_.linear_group(gate_up, h, T);
      rnd(g, T * I);
      rnd(u, T * I);
      be_.silu_mul(g, u, g, T * I);
      rnd(g, T * I);
      be_.linear(L.down, g, T, h);
      rnd(h, T * H);
      be_.add_inplace(x, h, T * H);
      rnd(x, T * H);
    }
    // Only the requested rows go through the final norm and the LM head.
    const int64_t R = int64_t(fb.logits_indices.size());
    for (int64_t r = 0; r < R; ++r) {
      const int32_t row = fb.logits_indices[r];
      KCHECK(row >= 0 && row < T, "logits index {} out of range", row);
      std::copy(x + int64_t(row) * H, x + int64_t(row + 1) * H, h + r * H);
    }
    be_.rms_norm(h, final_norm_.data(), eps, R, H, h, act_);
    be_.linear(lm_head_, h, R, logits);
    rnd(logits, R * cfg_.vocab_size);
  }

 private:
  // Activation buffers, grown to the largest batch seen and reused.
  struct Workspace {
    std::vector<float> x, h, q, k, v, attn, gate, up;
    int64_t tokens = 0;
    void ensure(int64_t T, int64_t H, int64_t I, int64_t qd, int64_t kvd) {
      if (T <= tokens) return;
      tokens = T;
      x.resize(T * H);
      h.resize(T * std::max(H, qd));
      q.resize(T * qd);
      k.resize(T * kvd);
      v.resize(T * kvd);
      attn.resize(T * qd);
      gate.resize(T * I);
      up.resize(T * I);
    }
  };

  ModelConfig cfg_;
  DType act_;
  DType kv_dtype_;
  Backend& be_;
  Tensor embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
  RopeTable rope_;
  Workspace ws_;
};

}  // namespace

Expected<std::unique_ptr<CausalLM>> build_llama(const ModelConfig& cfg, DType act_dtype,
                                                DType kv_dtype, WeightSource& src,
                                                Backend& backend) {
  auto m = std::make_unique<LlamaModel>(cfg, act_dtype, kv_dtype, backend);
  KTRY(m->load(src));
  return std::unique_ptr<CausalLM>(std::move(m));
}

}  // namespace kestrel
