#include "spec_decode/model_proposer.h"

#include <algorithm>

#include "base/request_table.h"
#include "model/batch_builder.h"

namespace kestrel {

namespace {

int32_t argmax(const float* row, int64_t n) {
  return int32_t(std::max_element(row, row + n) - row);
}

// One class for both: they differ only in what the first pass feeds and which forward runs.
class ModelProposer final : public Proposer {
 public:
  // mtp: `model` is the target, run through its MTP module; else `model` is the draft model.
  ModelProposer(CausalLM& model, bool mtp, const ProposerOptions& o)
      : model_(model),
        mtp_(mtp),
        k_(o.config.k()),
        max_model_len_(o.max_model_len),
        kv_(mtp ? model.make_kv_cache_for_layers(1, o.num_blocks, o.block_size)
                : model.make_kv_cache(o.num_blocks, o.block_size)),
        builder_(o.block_size) {}

  void propose(std::span<const ProposalInput> inputs, CausalLM& target, bool draft,
               std::vector<std::vector<int32_t>>& drafts) override {
    drafts.assign(inputs.size(), {});
    // A draft model catches up later over the tokens it skipped; MTP cannot (it needs the
    // target's hidden states of those positions), but its pass is one layer.
    if (!draft && !mtp_) return;
    const int64_t H = model_.config().hidden_size;
    // Pass 1: every valid position not yet in the proposer's cache, with logits for the last
    // row of each request that gets drafts.
    builder_.clear();
    active_.clear();
    std::vector<int32_t> hidden_rows;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ProposalInput& in = inputs[i];
      const int64_t wanted = draft && in.sampled ? budget(in) : 0;
      int64_t from = in.start, end = in.start + in.num_valid;
      if (mtp_) {
        // Row p takes token p + 1, which a request whose sampling failed lacks for its last row.
        end = std::min(end, int64_t(in.tokens.size()) - 1);
      } else {
        // Positions before `start` are in the cache unless skipped steps left them out (a
        // handle seen first, or a recompute from `start`, trusts the blocks before it).
        int64_t* valid = valid_.find(in.id);
        if (valid != nullptr) from = std::min(*valid, from);
        if (in.sampled) ++end;  // and the token just sampled
        valid_[in.id] = end;
      }
      if (end <= from) continue;
      builder_.add(in.tokens.subspan(size_t(from + (mtp_ ? 1 : 0)), size_t(end - from)),
                   int32_t(from), in.block_table,
                   wanted > 0 ? BatchBuilder::Logits::kLast : BatchBuilder::Logits::kNone);
      if (mtp_)
        for (int64_t p = from; p < end; ++p)
          hidden_rows.push_back(int32_t(in.batch_offset + p - in.start));
      if (wanted > 0) active_.push_back(Active{i, wanted, end});
    }
    if (builder_.batch().token_ids.empty()) return;
    if (mtp_) {
      hidden_.resize(hidden_rows.size() * size_t(H));
      target.final_hidden(hidden_rows, hidden_.data());
    }
    run(drafts);
    // Further passes: one token per request still short of its drafts, at the next position.
    for (int64_t s = 1; s < k_; ++s) {
      std::erase_if(active_,
                    [&](const Active& a) { return int64_t(drafts[a.input].size()) >= a.wanted; });
      if (active_.empty()) break;
      builder_.clear();
      if (mtp_) hidden_.resize(active_.size() * size_t(H));
      for (size_t j = 0; j < active_.size(); ++j) {
        Active& a = active_[j];
        const std::vector<int32_t>& d = drafts[a.input];
        builder_.add(std::span<const int32_t>(&d.back(), 1), int32_t(a.next_position),
                     inputs[a.input].block_table, BatchBuilder::Logits::kLast);
        ++a.next_position;
        if (mtp_)
          std::copy_n(next_hidden_.data() + a.hidden_row * size_t(H), H,
                      hidden_.data() + j * size_t(H));
      }
      run(drafts);
    }
  }

  void finished(RequestHandle id) override { valid_.erase(id); }
  int64_t max_drafts() const override { return k_; }

 private:
  struct Active {
    size_t input;           // index into the inputs
    int64_t wanted;         // drafts it may get
    int64_t next_position;  // where its next token goes
    size_t hidden_row = 0;  // its row of next_hidden_ after the last pass (MTP)
  };

  // Drafts after the request's last token: k, and none that would end past max_model_len (the
  // token sampled after the last draft needs a position too).
  int64_t budget(const ProposalInput& in) const {
    return std::clamp<int64_t>(max_model_len_ - int64_t(in.tokens.size()) - 1, 0, k_);
  }

  // Runs the built batch; each active request's logits row gives its next draft.
  void run(std::vector<std::vector<int32_t>>& drafts) {
    const ForwardBatch batch = builder_.batch();
    const int64_t V = model_.config().vocab_size;
    const size_t rows = batch.logits_indices.size();
    logits_.resize(std::max<size_t>(rows, 1) * size_t(V));
    if (mtp_) {
      next_hidden_.resize(std::max<size_t>(rows, 1) * size_t(model_.config().hidden_size));
      model_.mtp_forward(batch, hidden_.data(), kv_, logits_.data(), next_hidden_.data());
    } else {
      model_.forward(batch, kv_, logits_.data());
    }
    for (size_t j = 0; j < active_.size(); ++j) {
      drafts[active_[j].input].push_back(argmax(logits_.data() + j * size_t(V), V));
      active_[j].hidden_row = j;
    }
  }

  CausalLM& model_;
  const bool mtp_;
  const int64_t k_;
  const int64_t max_model_len_;
  KVCacheStorage kv_;
  BatchBuilder builder_;
  std::vector<Active> active_;  // requests getting drafts, in batch order
  // Draft model: per request, the positions [0, n) its cache holds for the request's tokens.
  RequestTable<int64_t> valid_;
  std::vector<float> hidden_, next_hidden_, logits_;
};

}  // namespace

std::unique_ptr<Proposer> make_mtp_proposer(CausalLM& target, const ProposerOptions& options) {
  return std::make_unique<ModelProposer>(target, true, options);
}

std::unique_ptr<Proposer> make_draft_model_proposer(const ProposerOptions& options) {
  return std::make_unique<ModelProposer>(*options.draft_model, false, options);
}

}  // namespace kestrel
