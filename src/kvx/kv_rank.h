// kvx/kv_rank.h — what one rank's KV pool is, as the transfer path describes it to a peer in
// the handshake (issue 21): whose engine and which incarnation of it, the compatibility key
// (everything both sides must share for a block's bytes to mean the same: model shape, cache
// dtype, block size, cache kind), and which of the model's KV heads this rank's blocks hold
// (a TP rank's range; the whole one for a latent MLA cache). Plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/kv_storage.h"

namespace kestrel {

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
