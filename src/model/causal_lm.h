// model/causal_lm.h — the contract between a model and whoever batches for it (the model runner,
// and the CLI's generate): a flat batch of tokens from several sequences in, logits of chosen
// rows out, with the K/V written to a KVCacheStorage as a side effect.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/ops.h"
#include "model/config.h"
#include "model/kv_layout.h"
#include "model/kv_storage.h"
#include "tensor/tensor.h"

namespace kestrel {

// Per KV cache group g (KVCacheStorage::layout()), slot_mapping[g·T + t] is token t's slot in
// that group's blocks and block_tables[(g·S + s)·max_blocks_per_seq + b] sequence s's block b.
struct ForwardBatch {
  std::span<const int32_t> token_ids;        // [T]
  std::span<const int32_t> positions;        // [T]
  std::span<const int64_t> slot_mapping;     // [G, T] KV slot of each token
  std::span<const int32_t> query_start_loc;  // [S + 1]
  std::span<const int32_t> block_tables;     // [G, S, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int num_kv_groups = 1;
  std::span<const int32_t> logits_indices;  // rows of T whose logits are wanted
  // Models with linear-attention layers: sequence s's state slot in the KV storage ([S]). A
  // sequence whose first position here is 0 starts from a zero state; one that starts later
  // continues the state the slot holds.
  std::span<const int32_t> state_slots;
  // Per sequence ([S], or empty: none), n: its last n tokens before its final one (a decode
  // token's drafts but the last) leave their states in the slot's draft snapshots 0..n-1
  // (KVCacheStorage::draft_snapshot), so a rejected draft's state can be undone.
  std::span<const int32_t> state_snapshots;
  // Per sequence ([S], or empty: none), a state slot that receives its state before its final
  // token here (-1: none): a PD producer's prompt, whose decode instance computes that token
  // again from this state.
  std::span<const int32_t> state_holds;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // Writes [logits_indices.size(), vocab] f32 logits into `logits`.
  virtual void forward(const ForwardBatch& batch, KVCacheStorage& kv, float* logits) = 0;
  // forward() in two phases, for callers that want the logits of many rows in bounded memory:
  // the batch through every layer (batch.logits_indices unused), then the logits of any rows of
  // it, [rows.size(), vocab], in as many calls as wanted until the next forward.
  virtual void forward_hidden(const ForwardBatch& batch, KVCacheStorage& kv) = 0;
  virtual void head_logits(std::span<const int32_t> rows, float* logits) = 0;
  // Bytes of weights read by one decode step (for bandwidth figures).
  virtual size_t weight_bytes() const = 0;
  // Bytes of weights held in memory (differs from weight_bytes() for MoE models, whose decode
  // step reads only the experts it routes to).
  virtual size_t resident_weight_bytes() const { return weight_bytes(); }
  // The dtype KV caches of this model are stored in (--kv-cache-dtype).
  virtual DType kv_cache_dtype() const = 0;
  // The backend the model runs on: the runner samples with it (Backend::sample).
  virtual Backend& backend() = 0;
  // How the main layers' caches form groups over one block pool (model/kv_layout.h).
  KVCacheLayout kv_cache_layout(int block_size) const {
    return model_kv_cache_layout(config(), kv_cache_dtype(), block_size);
  }
  // KV storage for this model's main layers, with num_state_slots sequences' linear-attention
  // states and num_state_checkpoints kept ones when it has such layers.
  KVCacheStorage make_kv_cache(int64_t num_blocks, int block_size, int32_t num_state_slots = 0,
                               int32_t num_state_checkpoints = 0) const {
    return KVCacheStorage(kv_cache_layout(block_size), num_blocks, kv_cache_dtype(),
                          num_state_slots, num_state_checkpoints);
  }
  // KV storage of `layers` full-attention (or latent) layers: the MTP modules' cache.
  KVCacheStorage make_kv_cache_for_layers(int layers, int64_t num_blocks, int block_size) const {
    return KVCacheStorage(
        uniform_kv_cache_layout(layer_kv_cache_spec(config(), kv_cache_dtype(), block_size, -1),
                                layers),
        num_blocks, kv_cache_dtype());
  }

  // Multi-token prediction modules stored with the model (num_nextn_predict_layers, loaded).
  virtual int num_mtp_modules() const { return 0; }
  // The final-normed hidden states [rows.size(), hidden] of any rows of the last
  // forward_hidden(), as the head would see them (the input an MTP module takes next to the
  // following token); valid until the next forward.
  virtual void final_hidden(std::span<const int32_t> rows, float* out) {
    (void)rows, (void)out;
    KCHECK(false, "this model does not expose its hidden states");
  }
  // Runs MTP module 0: batch.token_ids are the next tokens t_{i+1}, batch.positions the positions
  // i of the hidden states `hidden` ([T, hidden], one row per batch token); mtp_kv holds the
  // module's own cache (make_kv_cache_for_layers(1, ...)). Writes logits of logits_indices rows
  // and, when next_hidden is not null, their pre-norm outputs [logits_indices.size(), hidden]:
  // the hidden state the module takes at the following position when it drafts again.
  virtual void mtp_forward(const ForwardBatch& batch, const float* hidden, KVCacheStorage& mtp_kv,
                           float* logits, float* next_hidden) {
    (void)batch, (void)hidden, (void)mtp_kv, (void)logits, (void)next_hidden;
    KCHECK(false, "this model has no MTP module");
  }
  // Ends a step: under expert parallelism across data-parallel ranks the model serves its peers'
  // MoE rounds until every rank has finished its step (model/expert_exchange.h). Call it once
  // after each step's last forward, and for a step that ran none, on every rank.
  virtual void finish_step() {}
};

}  // namespace kestrel
