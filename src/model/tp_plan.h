// model/tp_plan.h — which part of each layer a tensor-parallel rank holds (issue 20): a
// contiguous range of attention heads with the KV heads they read, of the MLP's (and each
// expert's) intermediate features, of the hidden features (the output projections' rows) and of
// the vocabulary. The loader takes each linear's rows of the rank's output features; the model
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
#include "dist/device_comm.h"
#include "model/config.h"

namespace kestrel {

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

struct TpShard {
  int rank = 0, size = 1;
  IndexRange q_heads;              // attention (or MLA) query heads
  IndexRange kv_heads;             // the KV heads those query heads read (a replicated one: size 1)
  IndexRange intermediate;         // dense MLP features
  IndexRange moe_intermediate;     // each routed expert's features (MoE models)
  IndexRange shared_intermediate;  // the shared experts' features, as one MLP (DeepSeek)
  IndexRange hidden;               // the output projections' (o, down) rows
  IndexRange vocab;                // embedding and LM-head rows
  // Expert parallelism: the routed experts this rank holds whole (empty: every expert split by
  // its features instead).
  IndexRange experts;
  bool operator==(const TpShard&) const = default;
};

// [begin, end) of part `rank` of `n` items split over `size` parts in units of `align` (the
// first parts take one unit more when the units do not divide evenly; the last part takes the
// remainder of a partial unit).
IndexRange split_range(int64_t n, int rank, int size, int64_t align = 1);

// A model's tensor parallelism: its shard, and the communicator its ranks gather features over
// (dist/device_comm.h; used by the thread that runs the model).
struct TensorParallel {
  TpShard shard;
  bool expert_parallel = false;  // the plan's `expert_parallel`
  DeviceComm* comm = nullptr;
  bool enabled() const { return shard.size > 1; }
};

// Rank `rank`'s shard of `config` over `size` ranks, or why the model cannot be split so (more
// ranks than heads, KV heads that neither split nor replicate evenly, fewer feature blocks
// than ranks, fewer experts than ranks). `expert_parallel`: whole routed experts per rank
// (contiguous ranges) instead of every expert's features split.
Expected<TpShard> plan_tp_shard(const ModelConfig& config, int rank, int size,
                                bool expert_parallel = false);

}  // namespace kestrel
