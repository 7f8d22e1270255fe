#include "spec_decode/proposer.h"

#include <algorithm>

#include "spec_decode/model_proposer.h"
#include "spec_decode/ngram.h"

namespace kestrel {

namespace {

class NgramProposer final : public Proposer {
 public:
  NgramProposer(const SpeculativeConfig& c, int64_t max_model_len)
      : min_n_(c.prompt_lookup_min),
        max_n_(c.prompt_lookup_max),
        k_(c.k()),
        max_model_len_(max_model_len) {}

  void propose(std::span<const ProposalInput> inputs, CausalLM&, bool draft,
               std::vector<std::vector<int32_t>>& drafts) override {
    drafts.assign(inputs.size(), {});
    if (!draft) return;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ProposalInput& in = inputs[i];
      if (!in.sampled) continue;
      // As vLLM: none that would end past max_model_len with the token sampled after them.
      const int64_t k = std::clamp<int64_t>(max_model_len_ - int64_t(in.tokens.size()) - 1, 0, k_);
      drafts[i] = ngram_propose(in.tokens, min_n_, max_n_, k);
    }
  }

  int64_t max_drafts() const override { return k_; }

 private:
  int64_t min_n_, max_n_, k_, max_model_len_;
};

}  // namespace

int64_t default_max_drafting_requests(int64_t k) {
  // A step of up to this many rows streams the weights about once (the float and int8 panels
  // take 16 rows per pass); past it every verify row costs compute.
  constexpr int64_t kCheapRows = 16;
  return std::max<int64_t>(1, kCheapRows / (k + 1));
}

Expected<size_t> proposer_table_group(const KVCacheLayout& layout) {
  for (size_t g = 0; g < layout.groups.size(); ++g)
    if (layout.groups[g].kind != KVCacheKind::kSlidingWindow) return g;
  return make_error(
      "--speculative-config: every KV cache group of the model is a sliding window, and a "
      "proposer's cache needs the blocks of a full-attention group");
}

int64_t proposer_kv_bytes_per_block(const CausalLM& target, const ProposerOptions& o) {
  switch (o.config.method) {
    case SpeculativeMethod::kNgram:
      return 0;
    case SpeculativeMethod::kMtp:
      return uniform_kv_cache_layout(
                 layer_kv_cache_spec(target.config(), target.kv_cache_dtype(), o.block_size, -1), 1)
          .bytes_per_block();
    case SpeculativeMethod::kDraftModel:
      return o.draft_model == nullptr
                 ? 0
                 : o.draft_model->kv_cache_layout(o.block_size).bytes_per_block();
  }
  return 0;
}

Expected<std::unique_ptr<Proposer>> make_proposer(CausalLM& target, const ProposerOptions& o) {
  const SpeculativeConfig& c = o.config;
  if (c.k() < 1) return make_error("--speculative-config: num_speculative_tokens must be >= 1");
  // A proposer with a cache of its own addresses it by a full-attention group's table.
  if (c.method != SpeculativeMethod::kNgram)
    KTRY(proposer_table_group(target.kv_cache_layout(o.block_size)));
  switch (c.method) {
    case SpeculativeMethod::kNgram:
      return std::unique_ptr<Proposer>(std::make_unique<NgramProposer>(c, o.max_model_len));
    case SpeculativeMethod::kMtp:
      if (target.num_mtp_modules() < 1)
        return make_error("--speculative-config method={}: the model has no MTP module loaded",
                          c.method_alias);
      return make_mtp_proposer(target, o);
    case SpeculativeMethod::kDraftModel: {
      if (o.draft_model == nullptr)
        return make_error("--speculative-config method=draft_model: no draft model loaded");
      const ModelConfig& d = o.draft_model->config();
      const ModelConfig& t = target.config();
      if (d.vocab_size != t.vocab_size)
        return make_error(
            "--speculative-config model={}: the draft model's vocabulary ({} tokens) differs "
            "from the target's ({}); a draft model must share the target's tokenizer",
            c.draft_model, d.vocab_size, t.vocab_size);
      if (d.max_position_embeddings < o.max_model_len)
        return make_error(
            "--speculative-config model={}: the draft model's context ({} tokens) is shorter "
            "than max_model_len ({})",
            c.draft_model, d.max_position_embeddings, o.max_model_len);
      const KVCacheLayout layout = o.draft_model->kv_cache_layout(o.block_size);
      if (layout.groups.size() != 1 || layout.groups[0].kind == KVCacheKind::kSlidingWindow)
        return make_error(
            "--speculative-config model={}: a draft model with sliding-window layers is not "
            "supported (its cache must be one full-attention group)",
            c.draft_model);
      return make_draft_model_proposer(o);
    }
  }
  return make_error("--speculative-config: unknown method");
}

}  // namespace kestrel
