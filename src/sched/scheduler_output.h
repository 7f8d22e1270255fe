// sched/scheduler_output.h — what one schedule() step asks the worker to compute, as plain data
// after vLLM v1: a request the worker has not seen comes once as NewRequestData (its prompt,
// sampling, blocks), then only as CachedRequestData deltas (blocks added, computed tokens, a
// resume after preemption). The worker keeps its own copy of every request until it appears in
// finished_ids, so it never reads scheduler memory; the type encodes to msgpack
// (sched/contract_codec.h) for workers in other processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"
#include "sched/request_sampling.h"

namespace kestrel {

// Block ids per KV cache group (one group for now: full attention or the MLA latent cache).
using GroupBlockIds = std::vector<std::vector<BlockId>>;

struct NewRequestData {
  RequestHandle id;
  std::vector<int32_t> prompt_token_ids;
  RequestSampling sampling;
  GroupBlockIds block_ids;
  int64_t num_computed_tokens = 0;  // prefix-cache hits
  bool operator==(const NewRequestData&) const = default;
};

struct CachedRequestData {
  RequestHandle id;
  // True after a preemption: block_ids replace the worker's table (the old blocks are gone)
  // and the tokens computed start again from num_computed_tokens.
  bool resumed_from_preemption = false;
  GroupBlockIds new_block_ids;  // appended to the table (the whole table when resumed)
  int64_t num_computed_tokens = 0;
  bool operator==(const CachedRequestData&) const = default;
};

// One request's work this step: num_tokens positions from its num_computed_tokens on, the last
// draft_token_ids.size() of which are speculative tokens to verify (none: it samples one token
// when the step reaches its last known token).
struct ScheduledTokens {
  RequestHandle id;
  int64_t num_tokens = 0;
  std::vector<int32_t> draft_token_ids;
  // Models with linear-attention layers: the request's running state slot, one of
  // [0, max_num_seqs), which the scheduler gave it (-1 for other models).
  int32_t state_slot = -1;
  bool operator==(const ScheduledTokens&) const = default;
};

// The allowed tokens of a request whose output is constrained (structured output), for each
// position it samples this step: its last known token's and one per draft (num_rows masks of
// bits.size() / num_rows words each; bit i of word i / 64 set = token i allowed).
struct TokenMask {
  RequestHandle id;
  std::vector<uint64_t> bits;
  int32_t num_rows = 1;
  bool operator==(const TokenMask&) const = default;
};

// Prefill/decode disaggregation: a consumer's workers read a request's prompt KV from the
// producer instance at host, whose TP ranks serve on port + rank: `remote_blocks` there into
// `local_blocks` here (same order), within timeout_ms. The request is not computed until the
// workers report the load (RunnerOutput::kv_loads).
struct KvLoad {
  uint64_t load_id = 0;  // unique per load: a request handle may be reused before it reports
  RequestHandle id;
  std::string host;
  int32_t port = 0;
  int32_t tp_size = 1;
  std::vector<int64_t> remote_blocks;
  std::vector<int64_t> local_blocks;
  // Linear-attention models: the producer's state slot held for the request, and the local
  // checkpoint slot the load fills (kv/state_checkpoints.h take()).
  int32_t remote_state = -1;
  int32_t local_state = -1;
  int64_t timeout_ms = 30000;
  bool operator==(const KvLoad&) const = default;
};

// Models with linear-attention layers: one copy of a recurrent state between slots of the
// workers' KV storage. The scheduler owns every slot — running ones [0, max_num_seqs), one per
// running request, and the checkpoint slots after them (prefix-cache checkpoints, and states
// held or loaded for a KV transfer) — and lists the copies a step needs, in the order the
// workers make them; the workers only copy.
enum class StateOpKind : uint8_t {
  // Before the forward pass: slot `src` (or its draft snapshot `snapshot`) into slot `dst`. A
  // request resuming from a checkpoint or a loaded state; a state the previous step left at a
  // block boundary, saved into a checkpoint before this step overwrites it.
  kCopyBefore,
  // During the forward pass: the state of request `id`'s running slot `src` before the step's
  // last token, into checkpoint `dst` (a PD producer's prompt, which its decode instance
  // computes again from there).
  kHold,
  // After the forward pass: running slot `src` into checkpoint `dst` (the step's tokens end on a
  // block boundary worth keeping).
  kCopyAfter,
};

struct StateOp {
  StateOpKind kind = StateOpKind::kCopyBefore;
  RequestHandle id;  // the request the copy is for (error messages, holds)
  int32_t src = -1;
  int32_t snapshot = -1;  // kCopyBefore: src's draft snapshot instead of src itself (-1: none)
  int32_t dst = -1;
  bool operator==(const StateOp&) const = default;
};

struct SchedulerOutput {
  std::vector<NewRequestData> new_requests;
  std::vector<CachedRequestData> cached_requests;
  std::vector<ScheduledTokens> scheduled;    // in batch order
  std::vector<TokenMask> token_masks;        // filled by the engine core after schedule()
  std::vector<RequestHandle> preempted_ids;  // preempted during this step
  std::vector<RequestHandle> finished_ids;   // finished or aborted since the previous step
  int64_t total_num_scheduled_tokens = 0;
  std::vector<KvLoad> kv_loads;    // loads to start this step
  std::vector<StateOp> state_ops;  // in the order they are made
  bool operator==(const SchedulerOutput&) const = default;
};

}  // namespace kestrel
