// kvx/kv_rank.h — what one rank's KV pool is, as the transfer path describes it to a peer in
// the handshake (issue 21): whose engine and which incarnation of it, the compatibility key
// (everything both sides must share for a block's bytes to mean the same: model shape, cache
// dtype, block size, cache kind), and which of the model's KV heads this rank's blocks hold
// (a TP rank's range; the whole one for a latent MLA cache). A model with linear-attention
// layers also moves one state slot per request: the rank says which of the layers' key heads
// it holds and how a slot is cut into their runs. Plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "kv/kv_memory.h"

namespace kestrel {

// A rank's linear-attention state as the transfer cuts it (model/gated_deltanet.cc's layout):
// each layer of a slot holds, for the rank's key heads in order, their q conv rows, then their k
// conv rows, then their value heads' conv rows, then those value heads' recurrent matrices.
struct StateRankInfo {
  int layers = 0;  // 0: no state
  int32_t entries = 0;
  int key_head_begin = 0, key_head_end = 0, total_key_heads = 0;
  int64_t qk_conv = 0;    // f32 values of one key head's q (or k) conv rows
  int64_t v_conv = 0;     // of its value heads' conv rows
  int64_t recurrent = 0;  // of its value heads' matrices
  int64_t floats_per_layer() const {
    return int64_t(key_head_end - key_head_begin) * (2 * qk_conv + v_conv + recurrent);
  }
  bool operator==(const StateRankInfo&) const = default;
};

// One contiguous run of a state layer: `floats` values from `offset`.
struct StateRun {
  int64_t offset = 0, floats = 0;
};
// The four runs of key heads [h0, h1) (within the rank's) in one layer of its slot.
std::vector<StateRun> state_runs(const StateRankInfo& s, int h0, int h1);

struct KvRankInfo {
  std::string engine_id;
  uint64_t incarnation = 0;  // new at every start: a restarted peer is a new peer
  std::string compat;        // equal on both sides, or no transfer
  int tp_rank = 0, tp_size = 1;
  int head_begin = 0, head_end = 1;  // this rank's KV heads of the model's total_heads
  int total_heads = 1;
  int planes = 0;
  int64_t num_blocks = 0;
  size_t head_bytes = 0;  // one head of one block of one plane
  bool latent = false;
  StateRankInfo state;

  nlohmann::json to_json() const;
  static Expected<KvRankInfo> from_json(const nlohmann::json& j);
};

// The compatibility key of a model's KV cache: model type, layers, KV heads (the model's, not a
// rank's), head width, cache dtype, block size, and whether it is a latent (MLA) cache.
std::string kv_compat_key(const std::string& model_type, int64_t layers, int64_t kv_heads,
                          int64_t head_dim, const std::string& dtype, int block_size, bool latent);

// A rank's description of `memory`, whose blocks hold KV heads [head_begin, head_end) of
// total_heads (a latent cache: [0, 1) of 1).
KvRankInfo describe_kv_rank(const KVMemoryView& memory, std::string engine_id, uint64_t incarnation,
                            std::string compat, int tp_rank, int tp_size, int head_begin,
                            int head_end, int total_heads, bool latent);

}  // namespace kestrel
