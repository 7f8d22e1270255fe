// model/tp_group.h — the collectives of a tensor-parallel model (issue 20). Every linear of a
// rank computes whole output features (its rows of the weight over the whole input), never a
// partial sum: where a layer needs features other ranks computed, an all-gather assembles them
// (the attention heads' outputs and the MLP's intermediate features before the output
// projection, the output projection's hidden features after it, the LM head's vocabulary).
// Each value is then computed exactly as one process computes it, so a TP run gives the same
// bits as TP 1 — on the int8-activation paths too, where a row-parallel partial sum (one
// all-reduce per layer instead of two all-gathers) changes the rounding and, through the next
// layer's activation quantization, the logits (measured: 0.96 on the default model).
//
// Owned by the model; only the thread that runs the model's forward calls it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "distributed/device_comm.h"
#include "model/config.h"
#include "model/tp_plan.h"

namespace kestrel {

// Which split of a feature dimension a gather assembles.
enum class TpSplit {
  kAttention,
  kIntermediate,
  kMoeIntermediate,
  kSharedIntermediate,
  kHidden,
  kVocab,
  kExperts,     // whole routed experts (expert parallelism)
  kLinearValue  // the linear-attention layers' value features
};

// The features of `split` that `shard` holds (kAttention: in heads; kExperts: experts).
IndexRange tp_range(const TpShard& shard, TpSplit split);

class TpGroup {
 public:
  // `tp` must be enabled and planned from `config` (the whole model's). The rows go in and out
  // of the collectives' buffers by `be`'s copies.
  TpGroup(const ModelConfig& config, const TensorParallel& tp, Backend& be);

  const TpShard& shard() const { return shards_[size_t(rank_)]; }
  int size() const { return int(shards_.size()); }
  // The features of `split` this rank computes.
  IndexRange part(TpSplit split) const { return tp_range(shard(), split); }
  // The whole dimension of `split`.
  int64_t width(TpSplit split) const;

  // out [rows, width(split)] gets every rank's part: `local` [rows, part(split).size()] is this
  // rank's. Every rank calls it with the same split and rows. A failed collective (a rank that
  // died) throws, failing the step.
  void gather(TpSplit split, const float* local, int64_t rows, float* out);
  // Rows of varying counts: out's rows rows_of[r] are rank r's, `local` holds this rank's
  // (rows_of[rank()].size() rows of `width`). Every rank passes the same rows_of.
  void gather_rows(const float* local, std::span<const IndexRange> rows_of, int64_t width,
                   float* out);

 private:
  std::vector<TpShard> shards_;  // every rank's, in rank order
  int rank_;
  DeviceComm* comm_;
  Backend& be_;
  ModelConfig config_;
  std::vector<float> send_, recv_;  // parts padded to the widest rank's
  std::vector<RowCopy> copies_;     // a gather's, one per rank
};

}  // namespace kestrel
