#include "model/batch_builder.h"

#include <algorithm>

#include "base/status.h"
#include "kv/block_pool.h"

namespace kestrel {

BatchBuilder::BatchBuilder(int block_size, int num_kv_groups)
    : block_size_(block_size),
      num_groups_(num_kv_groups),
      slots_(size_t(num_kv_groups)),
      tables_(size_t(num_kv_groups)) {
  KCHECK(block_size > 0 && num_kv_groups > 0, "block size {}, {} KV cache groups", block_size,
         num_kv_groups);
}

void BatchBuilder::add(std::span<const int32_t> tokens, int32_t start_pos,
                       std::span<const int32_t> block_table, Logits logits) {
  const size_t n = logits == Logits::kAll ? tokens.size() : logits == Logits::kLast ? 1 : 0;
  add(tokens, start_pos, block_table, std::min(n, tokens.size()));
}

void BatchBuilder::add(std::span<const int32_t> tokens, int32_t start_pos,
                       std::span<const int32_t> block_table, size_t num_logits) {
  KCHECK(num_groups_ == 1, "one block table for {} KV cache groups", num_groups_);
  const std::vector<int32_t> table(block_table.begin(), block_table.end());
  add(tokens, start_pos, std::span<const std::vector<int32_t>>(&table, 1), num_logits);
}

void BatchBuilder::add_table(size_t group, std::span<const int32_t> table, int32_t start_pos,
                             size_t n) {
  const int64_t end = int64_t(start_pos) + int64_t(n);
  KCHECK(int64_t(table.size()) * block_size_ >= end,
         "block table of {} blocks cannot hold {} positions", table.size(), end);
  for (size_t i = 0; i < n; ++i) {
    const int32_t pos = start_pos + int32_t(i);
    slots_[group].push_back(int64_t(table[size_t(pos / block_size_)]) * block_size_ +
                            pos % block_size_);
  }
  tables_[group].emplace_back(table.begin(), table.end());
}

void BatchBuilder::add(std::span<const int32_t> tokens, int32_t start_pos,
                       std::span<const std::vector<int32_t>> tables, size_t num_logits,
                       int32_t state_slot, int32_t state_snapshots, int32_t state_hold) {
  KCHECK(num_logits <= tokens.size(), "{} logits rows for {} tokens", num_logits, tokens.size());
  KCHECK(state_snapshots >= 0 && size_t(state_snapshots) < std::max<size_t>(tokens.size(), 1),
         "{} state snapshots for {} tokens", state_snapshots, tokens.size());
  KCHECK(state_hold < 0 || (state_slot >= 0 && state_snapshots == 0 && !tokens.empty()),
         "a held state needs a state slot, tokens and no snapshots");
  KCHECK(tables.size() == size_t(num_groups_), "{} block tables for {} KV cache groups",
         tables.size(), num_groups_);
  for (size_t g = 0; g < tables.size(); ++g) add_table(g, tables[g], start_pos, tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t row = int32_t(tokens_.size());
    tokens_.push_back(tokens[i]);
    positions_.push_back(start_pos + int32_t(i));
    if (i + num_logits >= tokens.size()) logits_indices_.push_back(row);
  }
  qsl_.push_back(int32_t(tokens_.size()));
  state_slots_.push_back(state_slot);
  state_snapshots_.push_back(state_snapshots);
  state_holds_.push_back(state_hold);
}

ForwardBatch BatchBuilder::batch() const {
  const size_t S = qsl_.size() - 1;
  max_blocks_ = 0;
  for (const auto& group : tables_)
    for (const auto& t : group) max_blocks_ = std::max(max_blocks_, int(t.size()));
  flat_tables_.assign(size_t(num_groups_) * S * size_t(max_blocks_), kNullBlock);
  flat_slots_.clear();
  for (size_t g = 0; g < tables_.size(); ++g) {
    for (size_t s = 0; s < S; ++s)
      std::copy(tables_[g][s].begin(), tables_[g][s].end(),
                flat_tables_.begin() + std::ptrdiff_t((g * S + s) * size_t(max_blocks_)));
    flat_slots_.insert(flat_slots_.end(), slots_[g].begin(), slots_[g].end());
  }
  ForwardBatch b;
  b.token_ids = tokens_;
  b.positions = positions_;
  b.slot_mapping = flat_slots_;
  b.query_start_loc = qsl_;
  b.block_tables = flat_tables_;
  b.max_blocks_per_seq = max_blocks_;
  b.num_kv_groups = num_groups_;
  b.logits_indices = logits_indices_;
  b.state_slots = state_slots_;
  b.state_snapshots = state_snapshots_;
  b.state_holds = state_holds_;
  return b;
}

void BatchBuilder::clear() {
  tokens_.clear();
  positions_.clear();
  logits_indices_.clear();
  qsl_.assign(1, 0);
  state_slots_.clear();
  state_snapshots_.clear();
  state_holds_.clear();
  for (auto& s : slots_) s.clear();
  for (auto& t : tables_) t.clear();
}

}  // namespace kestrel
