#include "model/arch/decoder_model.h"

namespace kestrel {
namespace {

// One view of the batch per KV cache group: the group's slots, tables and window.
std::vector<AttentionBatch> attention_batches(const ForwardBatch& fb, const KVCacheStorage& kv) {
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

}  // namespace

DecoderModel::DecoderModel(const ModelConfig& cfg, DType act, const KvCacheQuant& kv,
                           Backend& backend, const TensorParallel& tp)
    : cfg_(cfg),
      act_(act),
      be_(backend),
      rank_cfg_(cfg),
      kv_(kv),
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

Status DecoderModel::load(WeightSource& src) {
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
  // Vocabulary-parallel head: this rank's rows (a view; the embedding stays whole, since every
  // rank looks up every token).
  lm_head_.w = vocab_rows(lm_head_.w);
  KASSIGN(final_norm_, load_norm_with_bias(src, m + "norm", H, cfg_));
  be_.prepare_weight(lm_head_, act_, "lm_head");
  rope_ = make_rope_table(cfg_, src.rope_freq_divisors());
  return load_layers(lc);
}

size_t DecoderModel::weight_bytes() const {
  return lm_head_.nbytes() + layers_weight_bytes();
}

size_t DecoderModel::resident_weight_bytes() const {
  // A tied head (whole or this rank's rows of it) lies inside the embedding.
  size_t b = tied_ ? embed_.nbytes() : lm_head_.nbytes() + embed_.nbytes();
  b += layers_resident_bytes();
  if (mtp_) {
    b += mtp_->eh_proj.nbytes() + blocks_resident_bytes(std::span(&mtp_->block, 1));
    if (mtp_->head.w.data != lm_head_.w.data) b += mtp_->head.nbytes();
  }
  return b;
}

void DecoderModel::forward(const ForwardBatch& fb, KVCacheStorage& kv, float* logits) {
  forward_hidden(fb, kv);
  head(fb.logits_indices, final_norm_, lm_head_, logits);
}

void DecoderModel::head_logits(std::span<const int32_t> rows, float* logits) {
  head(rows, final_norm_, lm_head_, logits);
}

void DecoderModel::embed(const LayerContext& ctx, const int32_t* ids, float* x) {
  be_.embedding(embed_, ids, ctx.num_tokens, x);
  ctx.round(x, ctx.num_tokens * cfg_.hidden_size);
}

void DecoderModel::forward_hidden(const ForwardBatch& fb, KVCacheStorage& kv) {
  const int64_t T = int64_t(fb.token_ids.size());
  KCHECK(fb.positions.size() == size_t(T), "batch arrays disagree on token count");
  ws_.ensure(T, cfg_.hidden_size);
  float* x = ws_.x.data();
  const std::vector<AttentionBatch> ab = attention_batches(fb, kv);
  const RopeParams rp = params_of(rope_);
  const LayerContext ctx = context(fb, ab, rp, kv);
  embed(ctx, fb.token_ids.data(), x);
  run_layers(ctx, x);
  tokens_ = T;
}

void DecoderModel::finish_step() {
  if (!experts_) return;
  // The peers' rows need only the experts: a context with no tokens and no attention (a
  // one-block cache, made once, stands in for the KV cache nothing reads).
  if (!idle_kv_) idle_kv_ = std::make_unique<KVCacheStorage>(make_kv_cache_for_layers(1, 1, 16));
  const RopeParams rp = params_of(rope_);
  const LayerContext ctx{be_,
                         act_,
                         float(cfg_.rms_norm_eps),
                         0,
                         nullptr,
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

void DecoderModel::final_hidden(std::span<const int32_t> rows, float* out) {
  normed_rows(rows, final_norm_, out);
}

void DecoderModel::mtp_forward(const ForwardBatch& fb, const float* hidden, KVCacheStorage& mtp_kv,
                               float* logits, float* next_hidden) {
  KCHECK(mtp_ != nullptr, "this model has no MTP module");
  const int64_t T = int64_t(fb.token_ids.size()), H = cfg_.hidden_size;
  ws_.ensure(T, H);
  float* x = ws_.x.data();
  float* cat = ws_.cat.data();
  // The embeddings go to y: `hidden` may be ws_.h, where head() leaves its normed rows.
  float* e = ws_.y.data();
  const std::vector<AttentionBatch> ab = attention_batches(fb, mtp_kv);
  const RopeParams rp = params_of(rope_);
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
  run_pre_norm_blocks(ctx, std::span(&mtp_->block, 1), H, block_buffers(), x);
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
    const RowCopy normed{
        .src = ws_.h.data(), .dst = next_hidden, .rows = R, .width = H, .src_row = H, .dst_row = H};
    be_.copy_rows({&normed, 1});
  }
}

Tensor DecoderModel::vocab_rows(Tensor w) const {
  if (!tp_.enabled()) return w;
  w.data = w.row(tp_.shard.vocab.begin);
  w.shape = Shape{tp_.shard.vocab.size(), cfg_.hidden_size};
  return w;
}

void DecoderModel::use_local_rope(const ModelConfig& local) {
  rope_local_ = make_rope_table(local);
  rope_local_params_ = params_of(rope_local_);
}

LayerContext DecoderModel::context(const ForwardBatch& fb, std::span<const AttentionBatch> ab,
                                   const RopeParams& rp, KVCacheStorage& kv) {
  return LayerContext{be_,
                      act_,
                      float(cfg_.rms_norm_eps),
                      int64_t(fb.token_ids.size()),
                      fb.positions.data(),
                      fb.token_ids.data(),
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

// The batch's sequences as linear-attention layers take them; a sequence's draft snapshots are
// its slot's first ones.
RecurrentBatch DecoderModel::recurrent_batch(const ForwardBatch& fb, const KVCacheStorage& kv) {
  const size_t S = fb.query_start_loc.size() - 1;
  RecurrentBatch rb;
  rb.num_seqs = int(S);
  rb.query_start_loc = fb.query_start_loc.data();
  rb.positions = fb.positions.data();
  if (fb.state_slots.empty()) return rb;
  KCHECK(fb.state_slots.size() == S && (fb.state_holds.empty() || fb.state_holds.size() == S) &&
             (fb.state_snapshots.empty() || fb.state_snapshots.size() == S),
         "{} state slots, {} holds and {} snapshot counts for {} sequences", fb.state_slots.size(),
         fb.state_holds.size(), fb.state_snapshots.size(), S);
  rb.state_slots = fb.state_slots.data();
  if (!fb.state_holds.empty()) rb.hold_slots = fb.state_holds.data();
  if (!fb.state_snapshots.empty()) {
    snapshot_slots_.resize(S);
    for (size_t s = 0; s < S; ++s)
      snapshot_slots_[s] = fb.state_snapshots[s] > 0 ? kv.draft_snapshot(fb.state_slots[s], 0) : -1;
    rb.snapshot_counts = fb.state_snapshots.data();
    rb.snapshot_slots = snapshot_slots_.data();
  }
  return rb;
}

RopeParams DecoderModel::params_of(const RopeTable& t) const {
  RopeParams rp;
  rp.inv_freq = t.inv_freq.data();
  rp.rot_dim = t.rot_dim;
  rp.attention_factor = t.attention_factor;
  rp.interleaved = t.interleaved;
  rp.act = act_;
  return rp;
}

// Only the requested rows of the last pass go through the final norm and the head; their normed
// hidden states stay in ws_.h. Under tensor parallelism `w` holds this rank's vocabulary rows:
// each rank computes its rows' logits and a gather gives every rank all of them.
void DecoderModel::head(std::span<const int32_t> rows, const Norm& norm, const LinearWeight& w,
                        float* logits) {
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
  finish_logits(logits, R);
}

// Rows of the last pass's residual stream through `norm`, into out [rows.size(), hidden].
void DecoderModel::normed_rows(std::span<const int32_t> rows, const Norm& norm, float* out) {
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

void DecoderModel::Streams::ensure(int64_t T, int64_t H) {
  if (T <= tokens) return;
  tokens = T;
  x.resize(T * H);
  h.resize(T * H);
  y.resize(T * H);
  cat.resize(T * 2 * H);
}

}  // namespace kestrel
