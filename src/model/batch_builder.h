// model/batch_builder.h — assembles the flat ForwardBatch arrays (positions, slot mappings and
// block tables per KV cache group, query offsets, logits rows) from per-sequence pieces.
#pragma once

#include <span>
#include <vector>

#include "model/causal_lm.h"

namespace kestrel {

class BatchBuilder {
 public:
  explicit BatchBuilder(int block_size, int num_kv_groups = 1);

  enum class Logits { kNone, kLast, kAll };

  // Adds `tokens` of one sequence at positions start_pos.. whose KV blocks in group g are
  // tables[g] (each must cover start_pos + tokens.size() positions), with logits for the last
  // `num_logits` tokens (a decode row and its drafts), and for models with linear-attention
  // layers its state slot (ForwardBatch::state_slots) and how many of its tokens before the
  // last keep a state snapshot (ForwardBatch::state_snapshots), and the slot that receives its
  // state before its last token (ForwardBatch::state_holds; -1: none).
  void add(std::span<const int32_t> tokens, int32_t start_pos,
           std::span<const std::vector<int32_t>> tables, size_t num_logits, int32_t state_slot = -1,
           int32_t state_snapshots = 0, int32_t state_hold = -1);
  // One KV cache group.
  void add(std::span<const int32_t> tokens, int32_t start_pos, std::span<const int32_t> block_table,
           Logits logits);
  void add(std::span<const int32_t> tokens, int32_t start_pos, std::span<const int32_t> block_table,
           size_t num_logits);

  // Views into this builder's arrays; valid until the next add() or clear().
  ForwardBatch batch() const;
  size_t num_logits() const { return logits_indices_.size(); }
  int num_kv_groups() const { return num_groups_; }
  void clear();

 private:
  void add_table(size_t group, std::span<const int32_t> table, int32_t start_pos, size_t n);

  int block_size_;
  int num_groups_;
  std::vector<int32_t> tokens_, positions_, qsl_{0}, logits_indices_, state_slots_,
      state_snapshots_, state_holds_;
  std::vector<std::vector<int64_t>> slots_;                // per group, [T]
  std::vector<std::vector<std::vector<int32_t>>> tables_;  // per group, per sequence
  mutable std::vector<int64_t> flat_slots_;
  mutable std::vector<int32_t> flat_tables_;
  mutable int max_blocks_ = 0;
};

}  // namespace kestrel
