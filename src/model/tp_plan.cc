#include "model/tp_plan.h"

#include <algorithm>

namespace kestrel {

namespace {

// Shards take whole panels of the packed weights (16 rows), and whole row blocks of an FP8
// checkpoint's scales (GGUF blocks run along a row, so rows never cut one).
constexpr int64_t kPanelRows = 16;

int64_t feature_align(const ModelConfig& c) {
  return c.fp8.enabled ? std::max<int64_t>(kPanelRows, c.fp8.block_rows) : kPanelRows;
}

}  // namespace

IndexRange split_range(int64_t n, int rank, int size, int64_t align) {
  const int64_t units = (n + align - 1) / align;
  const int64_t base = units / size, extra = units % size;
  const int64_t first = rank * base + std::min<int64_t>(rank, extra);
  const int64_t count = base + (rank < extra ? 1 : 0);
  return IndexRange{std::min(n, first * align), std::min(n, (first + count) * align)};
}

IndexRange expert_range(int64_t num_experts, int tp_rank, int tp_size, DataParallelPlace dp) {
  return split_range(num_experts, tp_rank * dp.size + dp.rank, tp_size * dp.size);
}

IndexRange tp_index_experts(int64_t num_experts, int tp_rank, int tp_size, int dp_size) {
  const int first = tp_rank * dp_size, n = tp_size * dp_size;
  return IndexRange{split_range(num_experts, first, n).begin,
                    split_range(num_experts, first + dp_size - 1, n).end};
}

Expected<TpShard> plan_tp_shard(const ModelConfig& c, int rank, int size, bool expert_parallel,
                                DataParallelPlace dp) {
  if (size < 1 || rank < 0 || rank >= size)
    return make_error("tensor parallelism: rank {} of {} is not a rank of the group", rank, size);
  if (dp.size < 1 || dp.rank < 0 || dp.rank >= dp.size)
    return make_error("expert parallelism: data-parallel rank {} of {} is not a rank", dp.rank,
                      dp.size);
  TpShard s;
  s.rank = rank;
  s.size = size;
  s.dp = dp;
  const int64_t heads = c.num_attention_heads;
  // MLA's latent cache has no KV heads to split: every rank keeps all of it.
  const int64_t kv = c.mla.enabled() ? 1 : c.num_key_value_heads;
  if (heads < size)
    return make_error(
        "--tensor-parallel-size {}: the model has only {} attention heads (one rank needs at "
        "least one)",
        size, heads);
  if (kv < 1 || heads % kv != 0)
    return make_error("tensor parallelism: {} attention heads do not form groups over {} KV heads",
                      heads, kv);
  const int64_t group = heads / kv;  // query heads per KV head
  if (kv >= size) {
    // Whole KV groups per rank.
    s.kv_heads = split_range(kv, rank, size);
    s.q_heads = IndexRange{s.kv_heads.begin * group, s.kv_heads.end * group};
  } else {
    if (size % kv != 0)
      return make_error(
          "--tensor-parallel-size {}: {} KV heads cannot be replicated evenly over {} ranks "
          "(the size must be a multiple of the KV head count)",
          size, kv, size);
    const int per_head = int(size / kv);  // ranks sharing each KV head
    if (group < per_head)
      return make_error(
          "--tensor-parallel-size {}: each KV group has {} query heads, fewer than the {} ranks "
          "that would share it",
          size, group, per_head);
    const int64_t head = rank / per_head;
    s.kv_heads = IndexRange{head, head + 1};
    const IndexRange part = split_range(group, rank % per_head, per_head);
    s.q_heads = IndexRange{head * group + part.begin, head * group + part.end};
  }
  const int64_t align = feature_align(c);
  // An MLP too narrow to give every rank a block is replicated: every rank holds all of it and
  // computes it whole (the same bits everywhere, no gathers).
  auto features = [&](int64_t n) -> IndexRange {
    if (n == 0) return IndexRange{};
    if ((n + align - 1) / align < size) return IndexRange{0, n};
    return split_range(n, rank, size, align);
  };
  s.intermediate = features(c.intermediate_size);
  if (expert_parallel && c.moe.num_experts > 0) {
    s.whole_experts = true;
    s.experts = expert_range(c.moe.num_experts, rank, size, dp);
  } else {
    s.moe_intermediate = features(c.moe.moe_intermediate_size);
  }
  s.shared_intermediate = features(c.moe.shared_expert_width());
  if (c.linear.enabled()) {
    // Whole key heads per rank, each with its value heads (the recurrence mixes a key head's
    // q and k into its value heads' state only).
    if (c.linear.num_key_heads < size)
      return make_error(
          "--tensor-parallel-size {}: the model's linear-attention layers have only {} key "
          "heads (one rank needs at least one)",
          size, c.linear.num_key_heads);
    s.linear_key_heads = split_range(c.linear.num_key_heads, rank, size);
    const int64_t per_key = c.linear.value_heads_per_key_head() * c.linear.value_head_dim;
    s.linear_value =
        IndexRange{s.linear_key_heads.begin * per_key, s.linear_key_heads.end * per_key};
  }
  if ((c.hidden_size + align - 1) / align < size)
    return make_error(
        "--tensor-parallel-size {}: the hidden state has {} features, fewer than one "
        "{}-feature block per rank",
        size, c.hidden_size, align);
  s.hidden = split_range(c.hidden_size, rank, size, align);
  s.vocab = split_range(c.vocab_size, rank, size);
  return s;
}

}  // namespace kestrel
