// model/batch_builder.h — assembles the flat ForwardBatch arrays (positions, slot mapping,
// block tables, query offsets, logits rows) from per-sequence pieces.
#pragma once

#include <span>
#include <vector>

#include "model/causal_lm.h"

namespace kestrel {

class BatchBuilder {
 public:
  explicit BatchBuilder(int block_size) : block_size_(block_size) {}

  enum class Logits { kNone, kLast, kAll };

  // Adds `tokens` of one sequence at positions start_pos.. whose KV blocks are `block_table`
  // (it must cover start_pos + tokens.size() positions).
  void add(std::span<const int32_t> tokens, int32_t start_pos, std::span<const int32_t> block_table,
           Logits logits);
  // The same, with logits for the last `num_logits` tokens (a decode row and its drafts).
  void add(std::span<const int32_t> tokens, int32_t start_pos, std::span<const int32_t> block_table,
           size_t num_logits);

  // Views into this builder's arrays; valid until the next add() or clear().
  ForwardBatch batch() const;
  size_t num_logits() const { return logits_indices_.size(); }
  void clear();

 private:
  int block_size_;
  std::vector<int32_t> tokens_, positions_, qsl_{0}, logits_indices_;
  std::vector<int64_t> slots_;
  std::vector<std::vector<int32_t>> tables_;
  mutable std::vector<int32_t> flat_tables_;
  mutable int max_blocks_ = 0;
};

}  // namespace kestrel
