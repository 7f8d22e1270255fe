#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "base/aligned_vector.h"
#include "model/layers.h"
#include "model/rope_table.h"

namespace kestrel {
namespace {

struct Block {
  Norm attn_norm, ffn_norm;
  // Gemma3's norms of the attention and FFN outputs (ModelConfig::sandwich_norms); else empty.
  std::vector<float> post_attn_norm, post_ffn_norm;
  std::unique_ptr<AttentionLayer> attn;
  std::unique_ptr<FfnLayer> ffn;
};

// A multi-token-prediction module: z = eh_proj([enorm(Emb(t_{i+1})) | hnorm(h_i)]), one
// decoder block with its own KV cache, then its own final norm and head. DeepSeek's
// (model.layers.L.{enorm, hnorm, eh_proj, shared_head}) drafts again from the block's output;
// Qwen3-Next's and Qwen3.5's (mtp.{pre_fc_norm_embedding, pre_fc_norm_hidden, fc, norm}, the
// block a full-attention layer, the head the model's) from that output after its norm.
struct MtpModule {
  std::vector<float> enorm, hnorm;
  Norm head_norm;
  LinearWeight eh_proj, head;
  Block block;
  bool drafts_from_normed = false;
};

// Layer `layer`'s block, its tensors under `p` (…layers.N.); the layer index says which
// attention and FFN it has (an index past the hidden layers: full attention).
Expected<Block> load_block(const LoadContext& lc, const std::string& p, int64_t layer) {
  const ModelConfig& c = lc.cfg;
  Block b;
  KASSIGN(b.attn_norm, load_norm_with_bias(lc.src, p + "input_layernorm", c.hidden_size, c));
  if (c.sandwich_norms) {
    KASSIGN(b.post_attn_norm,
            load_norm(lc.src, p + "post_attention_layernorm.weight", c.hidden_size, c));
    KASSIGN(b.ffn_norm,
            load_norm_with_bias(lc.src, p + "pre_feedforward_layernorm", c.hidden_size, c));
    KASSIGN(b.post_ffn_norm,
            load_norm(lc.src, p + "post_feedforward_layernorm.weight", c.hidden_size, c));
  } else {
    KASSIGN(b.ffn_norm,
            load_norm_with_bias(lc.src, p + "post_attention_layernorm", c.hidden_size, c));
  }
  if (c.is_linear_layer(layer)) {
    KASSIGN(b.attn, load_gated_deltanet(lc, p + "linear_attn."));
  } else if (c.mla.enabled()) {
    KASSIGN(b.attn, load_mla_attention(lc, p + "self_attn."));
  } else {
    KASSIGN(b.attn, load_gqa_attention(lc, p + "self_attn."));
  }
  if (c.moe.is_moe_layer(layer)) {
    KASSIGN(b.ffn, load_moe(lc, p + "mlp."));
  } else {
    KASSIGN(b.ffn, load_dense_mlp(lc, p + "mlp.", c.intermediate_size));
  }
  return b;
}

class TransformerModel final : public CausalLM {
 public:
  TransformerModel(const ModelConfig& cfg, DType act_dtype, const KvCacheQuant& kv,
                   Backend& backend, const TensorParallel& tp)
      : cfg_(cfg),
        rank_cfg_(cfg),
        act_(act_dtype),
        kv_(kv),
        be_(backend),
        tp_(tp),
        scratch_(backend.workspace()) {
    if (tp_.enabled()) {
      // What this rank holds, which its KV cache and the attention kernels are sized by.
      rank_cfg_.num_attention_heads = tp_.shard.q_heads.size();
      rank_cfg_.num_key_value_heads = tp_.shard.kv_heads.size();
      rank_cfg_.intermediate_size = tp_.shard.intermediate.size();
      if (cfg_.linear.enabled()) {
        // The recurrent state a rank keeps: its key heads' and their value heads'.
        rank_cfg_.linear.num_key_heads = tp_.shard.linear_key_heads.size();
        rank_cfg_.linear.num_value_heads =
            tp_.shard.linear_key_heads.size() * cfg_.linear.value_heads_per_key_head();
      }
      tp_group_ = std::make_unique<TpGroup>(cfg_, tp_, be_);
    }
    if (tp_.experts_sharded())
      experts_ = std::make_unique<ExpertExchange>(cfg_, tp_.shard, tp_.ep_comm);
  }

  Status load(WeightSource& src) {
    const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    const LoadContext lc{src,
                         cfg_,
                         store_,
                         be_,
                         act_,
                         tp_.enabled() || experts_ ? &tp_.shard : nullptr,
                         experts_.get(),
                         kv_};
    const std::string& m = cfg_.weight_prefix;
    KASSIGN(embed_, src.get(m + "embed_tokens.weight", Shape{V, H}));
    if (src.has("lm_head.weight") && !cfg_.tie_word_embeddings) {
      KASSIGN(lm_head_.w, src.get("lm_head.weight", Shape{V, H}));
    } else {
      lm_head_.w = embed_;
      tied_ = true;
    }
    // Vocabulary-parallel head: this rank's rows (a view; the embedding stays whole, since
    // every rank looks up every token).
    lm_head_.w = vocab_rows(lm_head_.w);
    KASSIGN(final_norm_, load_norm_with_bias(src, m + "norm", H, cfg_));
    for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
      KASSIGN(Block b, load_block(lc, fmt::format("{}layers.{}.", m, i), i));
      blocks_.push_back(std::move(b));
    }
    be_.prepare_weight(lm_head_, act_, "lm_head");
    rope_ = make_rope_table(cfg_, src.rope_freq_divisors());
    if (cfg_.rope_local_theta > 0) {
      ModelConfig local = cfg_;
      local.rope_theta = cfg_.rope_local_theta;
      local.rope_scaling = RopeScaling{};
      rope_local_ = make_rope_table(local);
      rope_local_params_ = params_of(rope_local_);
    }
    const std::string mtp = fmt::format("{}layers.{}.", m, cfg_.num_hidden_layers);
    if (cfg_.num_nextn_predict_layers > 0 && src.has(mtp + "eh_proj.weight")) {
      KTRY(load_mtp(lc, mtp));
    } else if (cfg_.num_nextn_predict_layers > 0 && src.has("mtp.fc.weight")) {
      KTRY(load_qwen_mtp(lc));
    }
    return Status::Ok();
  }

  // Under tensor parallelism: this rank's head and feature counts.
  const ModelConfig& config() const override { return rank_cfg_; }
  DType kv_cache_dtype() const override { return kv_.dtype; }
  Backend& backend() override { return be_; }
  int num_mtp_modules() const override { return mtp_ ? 1 : 0; }

  size_t weight_bytes() const override {
    size_t b = lm_head_.nbytes();
    for (const Block& blk : blocks_)
      b += blk.attn->weight_bytes() + blk.ffn->weight_bytes_per_token();
    return b;
  }

  size_t resident_weight_bytes() const override {
    // A tied head (whole or this rank's rows of it) lies inside the embedding.
    size_t b = tied_ ? embed_.nbytes() : lm_head_.nbytes() + embed_.nbytes();
    for (const Block& blk : blocks_) b += blk.attn->weight_bytes() + blk.ffn->resident_bytes();
    if (mtp_) {
      b += mtp_->eh_proj.nbytes() + mtp_->block.attn->weight_bytes() +
           mtp_->block.ffn->resident_bytes();
      if (mtp_->head.w.data != lm_head_.w.data) b += mtp_->head.nbytes();
    }
    return b;
  }

  void forward(const ForwardBatch& fb, KVCacheStorage& kv, float* logits) override {
    forward_hidden(fb, kv);
    head(fb.logits_indices, final_norm_, lm_head_, logits);
  }

  void head_logits(std::span<const int32_t> rows, float* logits) override {
    head(rows, final_norm_, lm_head_, logits);
  }

  void forward_hidden(const ForwardBatch& fb, KVCacheStorage& kv) override {
    const int64_t T = int64_t(fb.token_ids.size()), H = cfg_.hidden_size;
    KCHECK(fb.positions.size() == size_t(T), "batch arrays disagree on token count");
    ws_.ensure(T, H);
    float* x = ws_.x.data();
    const std::vector<AttentionBatch> ab = attention_batches(fb, kv);
    const RopeParams rp = rope_params();
    const LayerContext ctx = context(fb, ab, rp, kv);
    be_.embedding(embed_, fb.token_ids.data(), T, x);
    ctx.round(x, T * H);
    if (cfg_.scale_embeddings) {
      // Gemma: rows × sqrt(hidden), the factor in the weights' dtype as the reference casts it.
      float f = std::sqrt(float(H));
      be_.round_to(act_, &f, 1);
      be_.scale(x, T * H, f, act_);
    }
    run_blocks(ctx, blocks_, x);
    tokens_ = T;
  }

  void finish_step() override {
    if (!experts_) return;
    // The peers' rows need only the experts: a context with no tokens and no attention (a
    // one-block cache, made once, stands in for the KV cache nothing reads).
    if (!idle_kv_) idle_kv_ = std::make_unique<KVCacheStorage>(make_kv_cache_for_layers(1, 1, 16));
    const RopeParams rp = rope_params();
    const LayerContext ctx{be_,
                           act_,
                           float(cfg_.rms_norm_eps),
                           0,
                           nullptr,
                           {},
                           rp,
                           *idle_kv_,
                           scratch_,
                           tp_group_.get(),
                           experts_.get(),
                           cfg_.norm_offset,
                           {},
                           {}};
    experts_->finish_step(ctx);
  }

  void final_hidden(std::span<const int32_t> rows, float* out) override {
    normed_rows(rows, final_norm_, out);
  }

  void mtp_forward(const ForwardBatch& fb, const float* hidden, KVCacheStorage& mtp_kv,
                   float* logits, float* next_hidden) override {
    KCHECK(mtp_ != nullptr, "this model has no MTP module");
    const int64_t T = int64_t(fb.token_ids.size()), H = cfg_.hidden_size;
    ws_.ensure(T, H);
    float* x = ws_.x.data();
    float* cat = ws_.cat.data();
    // The embeddings go to y: `hidden` may be ws_.h, where head() leaves its normed rows.
    float* e = ws_.y.data();
    const std::vector<AttentionBatch> ab = attention_batches(fb, mtp_kv);
    const RopeParams rp = rope_params();
    const LayerContext ctx = context(fb, ab, rp, mtp_kv);
    be_.embedding(embed_, fb.token_ids.data(), T, e);
    ctx.round(e, T * H);
    // [enorm(e) | hnorm(hidden)] per token; h may be `hidden` itself, which rms_norm allows.
    float* h = ws_.h.data();
    ctx.rms_norm(e, mtp_->enorm.data(), T, H, e);
    ctx.rms_norm(hidden, mtp_->hnorm.data(), T, H, h);
    const RowCopy halves[2] = {
        {.src = e, .dst = cat, .rows = T, .width = H, .src_row = H, .dst_row = 2 * H},
        {.src = h, .dst = cat + H, .rows = T, .width = H, .src_row = H, .dst_row = 2 * H}};
    be_.copy_rows(halves);
    be_.linear(mtp_->eh_proj, cat, T, x);
    ctx.round(x, T * H);
    run_blocks(ctx, std::span<Block>(&mtp_->block, 1), x);
    tokens_ = T;
    const int64_t R = int64_t(fb.logits_indices.size());
    if (next_hidden != nullptr && !mtp_->drafts_from_normed) {
      for (const int32_t row : fb.logits_indices)
        KCHECK(row >= 0 && row < T, "logits index {} out of range", row);
      const RowCopy pick{.src = x,
                         .dst = next_hidden,
                         .rows = R,
                         .width = H,
                         .src_row = H,
                         .dst_row = H,
                         .src_rows = fb.logits_indices.data()};
      be_.copy_rows({&pick, 1});
    }
    head(fb.logits_indices, mtp_->head_norm, mtp_->head, logits);
    // head() leaves the rows it normed in ws_.h.
    if (next_hidden != nullptr && mtp_->drafts_from_normed) {
      const RowCopy normed{.src = ws_.h.data(),
                           .dst = next_hidden,
                           .rows = R,
                           .width = H,
                           .src_row = H,
                           .dst_row = H};
      be_.copy_rows({&normed, 1});
    }
  }

 private:
  // This rank's vocabulary rows of a [V, H] head (all of them without tensor parallelism).
  Tensor vocab_rows(Tensor w) const {
    if (!tp_.enabled()) return w;
    w.data = w.row(tp_.shard.vocab.begin);
    w.shape = Shape{tp_.shard.vocab.size(), cfg_.hidden_size};
    return w;
  }

  Status load_mtp(const LoadContext& lc, const std::string& p) {
    const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    auto m = std::make_unique<MtpModule>();
    KASSIGN(m->enorm, load_norm(lc.src, p + "enorm.weight", H, cfg_));
    KASSIGN(m->hnorm, load_norm(lc.src, p + "hnorm.weight", H, cfg_));
    KASSIGN(m->head_norm, load_norm_with_bias(lc.src, p + "shared_head.norm", H, cfg_));
    KASSIGN(m->eh_proj.w, lc.src.get(p + "eh_proj.weight", Shape{H, 2 * H}));
    if (lc.src.has(p + "shared_head.head.weight")) {
      KASSIGN(m->head.w, lc.src.get(p + "shared_head.head.weight", Shape{V, H}));
      m->head.w = vocab_rows(m->head.w);
      be_.prepare_weight(m->head, act_, p + "shared_head.head");
    } else {
      m->head = lm_head_;
    }
    be_.prepare_weight(m->eh_proj, act_, p + "eh_proj");
    KASSIGN(m->block, load_block(lc, p, cfg_.num_hidden_layers));
    mtp_ = std::move(m);
    return Status::Ok();
  }

  // Qwen3-Next's and Qwen3.5's module at the checkpoint's top level (mtp.*, also in the
  // vision-language wrappers), of which the first layer is loaded.
  Status load_qwen_mtp(const LoadContext& lc) {
    const int64_t H = cfg_.hidden_size;
    auto m = std::make_unique<MtpModule>();
    KASSIGN(m->enorm, load_norm(lc.src, "mtp.pre_fc_norm_embedding.weight", H, cfg_));
    KASSIGN(m->hnorm, load_norm(lc.src, "mtp.pre_fc_norm_hidden.weight", H, cfg_));
    KASSIGN(m->head_norm, load_norm_with_bias(lc.src, "mtp.norm", H, cfg_));
    KASSIGN(m->eh_proj.w, lc.src.get("mtp.fc.weight", Shape{H, 2 * H}));
    be_.prepare_weight(m->eh_proj, act_, "mtp.fc");
    m->head = lm_head_;
    m->drafts_from_normed = true;
    KASSIGN(m->block, load_block(lc, "mtp.layers.0.", cfg_.num_hidden_layers));
    mtp_ = std::move(m);
    return Status::Ok();
  }

  LayerContext context(const ForwardBatch& fb, std::span<const AttentionBatch> ab,
                       const RopeParams& rp, KVCacheStorage& kv) {
    return LayerContext{be_,
                        act_,
                        float(cfg_.rms_norm_eps),
                        int64_t(fb.token_ids.size()),
                        fb.positions.data(),
                        ab,
                        rp,
                        kv,
                        scratch_,
                        tp_group_.get(),
                        experts_.get(),
                        cfg_.norm_offset,
                        recurrent_batch(fb, kv),
                        rope_local_.rot_dim > 0 ? &rope_local_params_ : nullptr};
  }

  // The batch's sequences as linear-attention layers take them; a sequence's draft snapshots
  // are its slot's first ones.
  RecurrentBatch recurrent_batch(const ForwardBatch& fb, const KVCacheStorage& kv) {
    const size_t S = fb.query_start_loc.size() - 1;
    RecurrentBatch rb;
    rb.num_seqs = int(S);
    rb.query_start_loc = fb.query_start_loc.data();
    rb.positions = fb.positions.data();
    if (fb.state_slots.empty()) return rb;
    KCHECK(fb.state_slots.size() == S && (fb.state_holds.empty() || fb.state_holds.size() == S) &&
               (fb.state_snapshots.empty() || fb.state_snapshots.size() == S),
           "{} state slots, {} holds and {} snapshot counts for {} sequences",
           fb.state_slots.size(), fb.state_holds.size(), fb.state_snapshots.size(), S);
    rb.state_slots = fb.state_slots.data();
    if (!fb.state_holds.empty()) rb.hold_slots = fb.state_holds.data();
    if (!fb.state_snapshots.empty()) {
      snapshot_slots_.resize(S);
      for (size_t s = 0; s < S; ++s)
        snapshot_slots_[s] =
            fb.state_snapshots[s] > 0 ? kv.draft_snapshot(fb.state_slots[s], 0) : -1;
      rb.snapshot_counts = fb.state_snapshots.data();
      rb.snapshot_slots = snapshot_slots_.data();
    }
    return rb;
  }

  // One view of the batch per KV cache group: the group's slots, tables and window.
  static std::vector<AttentionBatch> attention_batches(const ForwardBatch& fb,
                                                       const KVCacheStorage& kv) {
    const size_t T = fb.token_ids.size(), S = fb.query_start_loc.size() - 1;
    const size_t G = size_t(kv.num_groups());
    KCHECK(fb.num_kv_groups == int(G) && fb.slot_mapping.size() == G * T &&
               fb.block_tables.size() == G * S * size_t(fb.max_blocks_per_seq),
           "a batch for {} KV cache groups ({} slots, {} table entries) on a cache of {}",
           fb.num_kv_groups, fb.slot_mapping.size(), fb.block_tables.size(), G);
    std::vector<AttentionBatch> out(G);
    for (size_t g = 0; g < G; ++g) {
      AttentionBatch& ab = out[g];
      ab.num_tokens = int64_t(T);
      ab.num_seqs = int(S);
      ab.positions = fb.positions.data();
      ab.slot_mapping = fb.slot_mapping.data() + g * T;
      ab.query_start_loc = fb.query_start_loc.data();
      ab.block_tables = fb.block_tables.data() + g * S * size_t(fb.max_blocks_per_seq);
      ab.max_blocks_per_seq = fb.max_blocks_per_seq;
      ab.sliding_window = kv.layout().groups[g].sliding_window;
    }
    return out;
  }

  RopeParams rope_params() const { return params_of(rope_); }
  RopeParams params_of(const RopeTable& t) const {
    RopeParams rp;
    rp.inv_freq = t.inv_freq.data();
    rp.rot_dim = t.rot_dim;
    rp.attention_factor = t.attention_factor;
    rp.interleaved = t.interleaved;
    rp.act = act_;
    return rp;
  }

  // Per block (cache layer = its index): x += attn(norm(x)); x += ffn(norm(x)), rounding where
  // the reference stores activations. Each residual add runs fused with the norm after it.
  void run_blocks(const LayerContext& ctx, std::span<Block> blocks, float* x) {
    const int64_t T = ctx.num_tokens, H = cfg_.hidden_size;
    float* h = ws_.h.data();
    float* y = ws_.y.data();
    const bool off = cfg_.norm_offset;
    ctx.rms_norm(x, blocks[0].attn_norm, T, H, h);
    for (size_t i = 0; i < blocks.size(); ++i) {
      Block& b = blocks[i];
      b.attn->forward(ctx, int(i), h, y);
      if (!b.post_attn_norm.empty()) ctx.rms_norm(y, b.post_attn_norm.data(), T, H, y);
      add_rms_norm_rows(be_, act_, off, x, y, b.ffn_norm, ctx.eps, T, H, h);
      b.ffn->forward(ctx, h, y);
      if (!b.post_ffn_norm.empty()) ctx.rms_norm(y, b.post_ffn_norm.data(), T, H, y);
      if (i + 1 < blocks.size()) {
        add_rms_norm_rows(be_, act_, off, x, y, blocks[i + 1].attn_norm, ctx.eps, T, H, h);
      } else {
        be_.add_inplace(x, y, T * H);
        ctx.round(x, T * H);
      }
    }
  }

  // Only the requested rows of the last pass go through the final norm and the head; their
  // normed hidden states stay in ws_.h. Under tensor parallelism `w` holds this
  // rank's vocabulary rows: each rank computes its rows' logits and a gather gives every rank
  // all of them.
  void head(std::span<const int32_t> rows, const Norm& norm, const LinearWeight& w, float* logits) {
    const int64_t R = int64_t(rows.size());
    float* h = ws_.h.data();
    normed_rows(rows, norm, h);
    if (!tp_group_) {
      be_.linear(w, h, R, logits);
      be_.round_to(act_, logits, R * cfg_.vocab_size);
    } else {
      const int64_t mine = tp_group_->part(TpSplit::kVocab).size();
      head_local_.resize(size_t(R * mine));
      be_.linear(w, h, R, head_local_.data());
      be_.round_to(act_, head_local_.data(), R * mine);
      tp_group_->gather(TpSplit::kVocab, head_local_.data(), R, logits);
    }
    // Gemma's c · tanh(logits / c), each step rounded as the reference computes it.
    if (cfg_.final_logit_softcapping > 0)
      be_.softcap(logits, R * cfg_.vocab_size, float(cfg_.final_logit_softcapping), act_);
  }

  // Rows of the last pass's residual stream through `norm`, into out [rows.size(), hidden].
  void normed_rows(std::span<const int32_t> rows, const Norm& norm, float* out) {
    const int64_t H = cfg_.hidden_size;
    const int64_t R = int64_t(rows.size());
    for (const int32_t row : rows)
      KCHECK(row >= 0 && row < tokens_, "logits index {} out of range", row);
    const RowCopy pick{.src = ws_.x.data(),
                       .dst = out,
                       .rows = R,
                       .width = H,
                       .src_row = H,
                       .dst_row = H,
                       .src_rows = rows.data()};
    be_.copy_rows({&pick, 1});
    rms_norm_rows(be_, act_, cfg_.norm_offset, out, norm, float(cfg_.rms_norm_eps), R, H, out);
  }

  // The residual stream and block-level buffers, grown to the largest batch seen.
  struct Streams {
    AlignedVector<float> x, h, y, cat;
    int64_t tokens = 0;
    void ensure(int64_t T, int64_t H) {
      if (T <= tokens) return;
      tokens = T;
      x.resize(T * H);
      h.resize(T * H);
      y.resize(T * H);
      cat.resize(T * 2 * H);
    }
  };

  ModelConfig cfg_;       // the whole model's, as the checkpoint stores it
  ModelConfig rank_cfg_;  // this rank's part (== cfg_ without tensor parallelism)
  DType act_;
  KvCacheQuant kv_;
  Backend& be_;
  TensorParallel tp_;
  WeightStore store_;
  Tensor embed_;
  LinearWeight lm_head_;
  bool tied_ = false;  // lm_head_ is (part of) embed_
  Norm final_norm_;
  std::vector<Block> blocks_;
  std::unique_ptr<MtpModule> mtp_;
  RopeTable rope_;
  RopeTable rope_local_;  // Gemma3's sliding-window layers' (rot_dim 0: none)
  RopeParams rope_local_params_;
  Scratch scratch_;
  Streams ws_;
  std::unique_ptr<TpGroup> tp_group_;        // set under tensor parallelism
  std::unique_ptr<ExpertExchange> experts_;  // set under expert parallelism
  std::unique_ptr<KVCacheStorage> idle_kv_;  // finish_step()'s stand-in
  std::vector<float> head_local_;            // this rank's vocabulary rows of the logits
  std::vector<int32_t> snapshot_slots_;      // recurrent_batch()'s
  int64_t tokens_ = 0;  // tokens of the last pass, whose residual stream ws_.x holds
};

}  // namespace

Expected<std::unique_ptr<CausalLM>> build_transformer(const ModelConfig& cfg, DType act_dtype,
                                                      const KvCacheQuant& kv, WeightSource& src,
                                                      Backend& backend, const TensorParallel& tp) {
  if (tp.enabled() && tp.comm == nullptr)
    return make_error("tensor parallelism: rank {} of {} has no communicator", tp.shard.rank,
                      tp.shard.size);
  auto m = std::make_unique<TransformerModel>(cfg, act_dtype, kv, backend, tp);
  KTRY(m->load(src));
  return std::unique_ptr<CausalLM>(std::move(m));
}

}  // namespace kestrel
