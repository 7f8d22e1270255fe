// model/tp_plan.h — which part of each layer a tensor-parallel rank holds (issue 20): a
// contiguous range of attention heads with the KV heads they read, of the linear-attention
// layers' key heads (each with its value heads and their recurrent state), of the MLP's (and
// each expert's) intermediate features, of the hidden features (the output projections' rows) and
// of the vocabulary. The loader takes each linear's rows of the rank's output features; the model
// all-gathers what the next layer needs (model/tp_group.h).
//
// vLLM requires every count to divide by the TP size. Kestrel splits as evenly as the structure
// allows instead, so a model such as SmolLM2-135M (9 heads in 3 KV groups) runs on 2 ranks
// (6 + 3 heads): heads move with their KV group; with fewer KV heads than ranks each KV head is
// replicated on size / kv_heads ranks (which must divide); feature ranges are multiples of 16
// rows (a packed weight panel; an FP8 checkpoint's 128-row scale block when larger), and an MLP
// (or expert) with fewer such blocks than ranks is replicated: its range is all of it on every
// rank. Pure functions.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "distributed/device_comm.h"
#include "model/config.h"

namespace kestrel {

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

// Where a tensor-parallel group stands among the data-parallel ranks, for expert parallelism
// across them (the routed experts spread over every rank of every group).
struct DataParallelPlace {
  int rank = 0, size = 1;
  bool operator==(const DataParallelPlace&) const = default;
};

struct TpShard {
  int rank = 0, size = 1;
  IndexRange q_heads;              // attention (or MLA) query heads
  IndexRange kv_heads;             // the KV heads those query heads read (a replicated one: size 1)
  IndexRange intermediate;         // dense MLP features
  IndexRange moe_intermediate;     // each routed expert's features (MoE models)
  IndexRange shared_intermediate;  // the shared expert(s)' features, as one MLP
  // Gated DeltaNet: the key heads with their value heads, and those value heads' features (the
  // recurrence's output, gathered before out_proj); empty for models without such layers.
  IndexRange linear_key_heads;
  IndexRange linear_value;
  IndexRange hidden;  // the output projections' (o, down) rows
  IndexRange vocab;   // embedding and LM-head rows
  // Expert parallelism (whole_experts): the routed experts this rank holds whole — none when
  // there are more ranks than experts; otherwise every expert is split by its features.
  bool whole_experts = false;
  IndexRange experts;
  DataParallelPlace dp;  // expert parallelism across data-parallel ranks
  bool operator==(const TpShard&) const = default;
};

// [begin, end) of part `rank` of `n` items split over `size` parts in units of `align` (the
// first parts take one unit more when the units do not divide evenly; the last part takes the
// remainder of a partial unit).
IndexRange split_range(int64_t n, int rank, int size, int64_t align = 1);

// The routed experts rank (dp, tp) holds under expert parallelism: part tp·dp_size + dp of the
// experts split over dp_size × tp_size ranks, so that the experts of one TP index, over every
// data-parallel rank, are contiguous (tp_index_experts) and a TP group gathers them as blocks.
IndexRange expert_range(int64_t num_experts, int tp_rank, int tp_size, DataParallelPlace dp);
// The experts of TP index `tp_rank` over every data-parallel rank.
IndexRange tp_index_experts(int64_t num_experts, int tp_rank, int tp_size, int dp_size);

// A model's tensor parallelism: its shard, and the communicator its ranks gather features over
// (distributed/device_comm.h; used by the thread that runs the model). Expert parallelism across
// data-parallel ranks (shard.dp) adds `ep_comm`: the group of the ranks with this rank's TP
// index, one per data-parallel rank in data-parallel order, that exchange routed token rows.
struct TensorParallel {
  TpShard shard;
  bool expert_parallel = false;  // the plan's `expert_parallel`
  DeviceComm* comm = nullptr;
  DeviceComm* ep_comm = nullptr;  // needed when expert_parallel and shard.dp.size > 1
  bool enabled() const { return shard.size > 1; }
  // Whether the model holds only some routed experts (over TP ranks, data-parallel ranks or both).
  bool experts_sharded() const { return expert_parallel && (shard.size > 1 || shard.dp.size > 1); }
};

// Rank `rank`'s shard of `config` over `size` ranks, or why the model cannot be split so (more
// ranks than heads, KV heads that neither split nor replicate evenly, fewer feature blocks
// than ranks). `expert_parallel`: whole routed experts per rank (expert_range over the `dp`
// ranks' groups; with more ranks than experts the last ranks hold none) instead of every
// expert's features split.
Expected<TpShard> plan_tp_shard(const ModelConfig& config, int rank, int size,
                                bool expert_parallel = false, DataParallelPlace dp = {});

}  // namespace kestrel
