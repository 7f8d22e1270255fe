#include "model/batch_builder.h"

#include <algorithm>

#include "base/status.h"

namespace kestrel {

void BatchBuilder::add(std::span<const int32_t> tokens, int32_t start_pos,
                       std::span<const int32_t> block_table, Logits logits) {
  const size_t n = logits == Logits::kAll ? tokens.size() : logits == Logits::kLast ? 1 : 0;
  add(tokens, start_pos, block_table, std::min(n, tokens.size()));
}

void BatchBuilder::add(std::span<const int32_t> tokens, int32_t start_pos,
                       std::span<const int32_t> block_table, size_t num_logits) {
  KCHECK(num_logits <= tokens.size(), "{} logits rows for {} tokens", num_logits, tokens.size());
  const int64_t end = int64_t(start_pos) + int64_t(tokens.size());
  KCHECK(int64_t(block_table.size()) * block_size_ >= end,
         "block table of {} blocks cannot hold {} positions", block_table.size(), end);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t pos = start_pos + int32_t(i);
    const int32_t row = int32_t(tokens_.size());
    tokens_.push_back(tokens[i]);
    positions_.push_back(pos);
    slots_.push_back(int64_t(block_table[pos / block_size_]) * block_size_ + pos % block_size_);
    if (i + num_logits >= tokens.size()) logits_indices_.push_back(row);
  }
  qsl_.push_back(int32_t(tokens_.size()));
  tables_.emplace_back(block_table.begin(), block_table.end());
}

ForwardBatch BatchBuilder::batch() const {
  max_blocks_ = 0;
  for (const auto& t : tables_) max_blocks_ = std::max(max_blocks_, int(t.size()));
  flat_tables_.assign(tables_.size() * size_t(max_blocks_), 0);
  for (size_t s = 0; s < tables_.size(); ++s)
    std::copy(tables_[s].begin(), tables_[s].end(), flat_tables_.begin() + s * max_blocks_);
  ForwardBatch b;
  b.token_ids = tokens_;
  b.positions = positions_;
  b.slot_mapping = slots_;
  b.query_start_loc = qsl_;
  b.block_tables = flat_tables_;
  b.max_blocks_per_seq = max_blocks_;
  b.logits_indices = logits_indices_;
  return b;
}

void BatchBuilder::clear() {
  tokens_.clear();
  positions_.clear();
  slots_.clear();
  logits_indices_.clear();
  qsl_.assign(1, 0);
  tables_.clear();
}

}  // namespace kestrel
