#include "model/tp_group.h"

#include <algorithm>
#include <stdexcept>

#include "base/status.h"

namespace kestrel {

TpGroup::TpGroup(const ModelConfig& config, const TensorParallel& tp, Backend& be)
    : rank_(tp.shard.rank), comm_(tp.comm), be_(be), config_(config) {
  KCHECK(tp.enabled() && comm_ != nullptr && comm_->size() == tp.shard.size,
         "a tensor-parallel group of {} ranks needs a communicator of that size", tp.shard.size);
  for (int r = 0; r < tp.shard.size; ++r) {
    // Every rank's plan passes the checks this rank's passed: they depend only on the config.
    auto s = plan_tp_shard(config, r, tp.shard.size, tp.expert_parallel, tp.shard.dp);
    KCHECK(s.ok(), "{}", s.ok() ? "" : s.error().message);
    shards_.push_back(*s);
  }
  KCHECK(shards_[size_t(rank_)] == tp.shard, "rank {}'s shard is not its plan", rank_);
}

IndexRange tp_range(const TpShard& s, TpSplit split) {
  switch (split) {
    case TpSplit::kAttention:
      return s.q_heads;
    case TpSplit::kIntermediate:
      return s.intermediate;
    case TpSplit::kMoeIntermediate:
      return s.moe_intermediate;
    case TpSplit::kSharedIntermediate:
      return s.shared_intermediate;
    case TpSplit::kHidden:
      return s.hidden;
    case TpSplit::kVocab:
      return s.vocab;
    case TpSplit::kExperts:
      return s.experts;
    case TpSplit::kLinearValue:
      return s.linear_value;
  }
  return {};
}

int64_t TpGroup::width(TpSplit split) const {
  switch (split) {
    case TpSplit::kAttention:
      return config_.num_attention_heads;
    case TpSplit::kIntermediate:
      return config_.intermediate_size;
    case TpSplit::kMoeIntermediate:
      return config_.moe.moe_intermediate_size;
    case TpSplit::kSharedIntermediate:
      return config_.moe.shared_expert_width();
    case TpSplit::kHidden:
      return config_.hidden_size;
    case TpSplit::kVocab:
      return config_.vocab_size;
    case TpSplit::kExperts:
      return config_.moe.num_experts;
    case TpSplit::kLinearValue:
      return config_.linear.value_dim();
  }
  return 0;
}

void TpGroup::gather(TpSplit split, const float* local, int64_t rows, float* out) {
  // Attention parts are counted in heads; each head's output is head_dim wide (MLA: v_head_dim).
  const int64_t head_width = config_.mla.enabled() ? config_.mla.v_head_dim : config_.head_dim;
  const int64_t unit = split == TpSplit::kAttention ? head_width : 1;
  const int64_t total = width(split) * unit;
  int64_t widest = 0;
  for (const TpShard& s : shards_) widest = std::max(widest, tp_range(s, split).size() * unit);
  const size_t part = size_t(rows * widest);
  const int64_t mine = tp_range(shard(), split).size() * unit;
  send_.assign(part, 0.0f);
  recv_.resize(part * shards_.size());
  const RowCopy pack{.src = local,
                     .dst = send_.data(),
                     .rows = rows,
                     .width = mine,
                     .src_row = mine,
                     .dst_row = widest};
  be_.copy_rows({&pack, 1});
  // Not a programming error: a rank died or hangs. The step fails; the executor ends the group.
  if (Status st = comm_->all_gather(send_.data(), part, recv_.data()); !st.ok())
    throw std::runtime_error(st.message());
  copies_.clear();
  for (size_t q = 0; q < shards_.size(); ++q) {
    const IndexRange ir = tp_range(shards_[q], split);
    copies_.push_back({.src = recv_.data() + q * part,
                       .dst = out + ir.begin * unit,
                       .rows = rows,
                       .width = ir.size() * unit,
                       .src_row = widest,
                       .dst_row = total});
  }
  be_.copy_rows(copies_);
}

void TpGroup::gather_rows(const float* local, std::span<const IndexRange> rows_of, int64_t width,
                          float* out) {
  int64_t widest = 0;
  for (const IndexRange& r : rows_of) widest = std::max(widest, r.size());
  const size_t part = size_t(widest * width);
  send_.assign(part, 0.0f);
  recv_.resize(part * rows_of.size());
  const IndexRange mine = rows_of[size_t(rank_)];
  const RowCopy pack{.src = local,
                     .dst = send_.data(),
                     .rows = mine.size(),
                     .width = width,
                     .src_row = width,
                     .dst_row = width};
  be_.copy_rows({&pack, 1});
  if (Status st = comm_->all_gather(send_.data(), part, recv_.data()); !st.ok())
    throw std::runtime_error(st.message());
  copies_.clear();
  for (size_t q = 0; q < rows_of.size(); ++q)
    copies_.push_back({.src = recv_.data() + q * part,
                       .dst = out + rows_of[q].begin * width,
                       .rows = rows_of[q].size(),
                       .width = width,
                       .src_row = width,
                       .dst_row = width});
  be_.copy_rows(copies_);
}

}  // namespace kestrel
