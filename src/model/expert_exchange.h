// model/expert_exchange.h — expert parallelism across data-parallel ranks (issue 20, vLLM's EP
// over DP × TP): the routed experts are spread over every rank of every data-parallel group
// (model/tp_plan.h: expert_range), and the ranks that share a TP index — one per data-parallel
// rank — exchange token rows at every MoE layer: each sends the peers the permuted rows routed
// to their experts (all-to-all), runs its experts over what it received, its own rows among
// them, and sends the results back, straight to their permuted positions. A TP group then
// gathers its TP indices' blocks as before (model/tp_group.h), and the combine is one process's.
// Every expert runs its rows in one batch with batch-invariant kernels, so outputs are the same
// bits as one process's.
//
// The data-parallel ranks run different batches, so each round starts with a header: whether the
// rank is done with its step, which MoE layer it is at, and how many rows it has per expert. A
// rank that has no more layers this step (its batch was empty — a dummy step of the lockstep —
// or it ran fewer drafting passes) keeps serving the others' rounds in finish_step() until every
// rank is done: so steps with different amounts of work, zero included, meet in every
// collective. Without data-parallel peers (one group) the experts simply run locally.
//
// Owned by the model; only the thread that runs the model's forward uses it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "distributed/device_comm.h"
#include "model/config.h"
#include "model/tp_plan.h"

namespace kestrel {

struct LayerContext;

// An MoE layer's experts, as the exchange runs them.
class ExpertRows {
 public:
  virtual ~ExpertRows() = default;
  // out[n, hidden] = expert `e` (one this rank holds) over in[n, hidden].
  virtual void run_expert(const LayerContext& ctx, int e, const float* in, int64_t n,
                          float* out) = 0;
};

class ExpertExchange {
 public:
  // `shard` places this rank; `comm` connects the ranks of its TP index over the shard.dp.size
  // data-parallel ranks (rank d = data-parallel rank d), or is null for one data-parallel rank.
  ExpertExchange(const ModelConfig& config, const TpShard& shard, DeviceComm* comm);

  // Registers an MoE layer (in the order every rank loads them); returns its id.
  int add_layer(ExpertRows* layer);

  // Layer `layer`'s routed rows: `in` [offsets.back(), hidden] permuted by expert as `offsets`
  // ([E + 1]) says. Fills `res` at the rows of the experts of this rank's TP index (every
  // data-parallel rank's: tp_index_experts) with their outputs. A failed collective throws.
  void run(const LayerContext& ctx, int layer, const float* in, std::span<const int32_t> offsets,
           float* res);
  // Serves the other ranks' rounds until every rank has finished its step. Call it once after
  // each step's last forward, on every rank, also when the step ran nothing.
  void finish_step(const LayerContext& ctx);

 private:
  // One round: this rank's header (done or at `layer` with its rows), the rows for each peer's
  // experts out, its experts over every peer's rows, the results back into `res`. Returns false
  // when every rank was done (nothing moved).
  bool round(const LayerContext& ctx, bool done, int layer, const float* in,
             std::span<const int32_t> offsets, float* res);

  int64_t H_;
  IndexRange mine_;                       // this rank's experts
  IndexRange index_experts_;              // its TP index's, over every data-parallel rank
  std::vector<IndexRange> peer_experts_;  // each data-parallel peer's (same TP index)
  DeviceComm* comm_;
  int me_ = 0, peers_ = 1;
  std::vector<ExpertRows*> layers_;
  // Grow-only buffers: headers, received rows, rows regrouped by expert, results.
  std::vector<int64_t> header_, headers_;
  std::vector<size_t> send_bytes_, recv_bytes_;
  std::vector<float> recv_, grouped_, outputs_, back_;
  std::vector<RowCopy> copies_;  // an expert's rows from (or back to) each peer
};

}  // namespace kestrel
