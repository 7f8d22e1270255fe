// sched/request.h — one generation request as the scheduler sees it: its tokens and how many of
// them already have K/V in the cache (num_computed_tokens), which the scheduler drives towards
// num_tokens() step by step.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_cache_manager.h"
#include "sched/request_sampling.h"

namespace kestrel {

// When a sampled token ends the request (applied to each sampled token in order).
struct StopRules {
  std::vector<int32_t> eos_token_ids;   // empty with ignore_eos
  std::vector<int32_t> stop_token_ids;  // the request's own; reported as its stop_reason
  int64_t min_tokens = 0;               // neither kind stops the request before this many outputs
};

// Prefill/decode disaggregation, consumer side: the prompt's KV was computed by a producer
// instance (its ranks serve at host:port + tp_rank) and sits in its blocks `blocks` (token
// order, one group); the request loads it instead of computing it.
struct RemotePrefill {
  std::string host;
  int32_t port = 0;
  int32_t tp_size = 1;
  std::vector<int64_t> blocks;
  int32_t state_slot = -1;     // linear-attention models: the producer's held state slot
  int64_t timeout_ms = 30000;  // for the load, then the request recomputes or fails
};

// What a request asks for, as the engine core hands it to the scheduler.
struct RequestSpec {
  RequestHandle id;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  RequestSampling sampling;
  StopRules stop;
  // false: the prompt is always computed (prompt logprobs need every position's logits); its
  // blocks are still offered to the cache.
  bool read_prefix_cache = true;
  // Mixed into every block hash (a hashed cache_salt): requests with different keys never share
  // cached blocks.
  std::vector<uint64_t> cache_keys;
  // Prefill/decode disaggregation, producer side: when the request finishes normally its blocks
  // are held (Scheduler::take_held) for a remote consumer to read, not freed.
  bool remote_decode = false;
  std::optional<RemotePrefill> remote_prefill;  // consumer side
};

enum class RequestStatus {
  kWaiting,
  kWaitingForRemoteKvs,  // its prompt's KV is being loaded from a producer
  kRunning,
  kPreempted,
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

bool is_finished_status(RequestStatus status);
const char* status_name(RequestStatus status);

struct Request {
  Request(RequestSpec spec, int64_t arrival);

  RequestHandle id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  // Prompt then outputs, kept contiguous for prefix-cache hashing.
  std::vector<int32_t> all_token_ids;
  int64_t num_computed_tokens = 0;
  int64_t max_tokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  int64_t arrival = 0;
  // Prompt tokens served by the prefix cache at first admission (usage.cached_tokens).
  int64_t num_cached_tokens = 0;
  bool read_prefix_cache = true;  // false: never start from cached blocks
  std::vector<uint64_t> cache_keys;
  // Chained hashes of its full blocks of all_token_ids (with cache_keys), extended as tokens
  // arrive, so a waiting request's prefix lookup hashes nothing; empty without prefix caching.
  std::vector<BlockHash> block_hashes;
  // Linear-attention models: the state checkpoint its decoding last saved (one is kept per
  // request, the latest: what a follow-up turn that repeats the answer resumes from).
  std::optional<BlockHash> decode_checkpoint;
  RequestSampling sampling;
  StopRules stop;
  // Speculative tokens proposed after the last token, verified by the next step that reaches it.
  std::vector<int32_t> draft_token_ids;
  // What the worker holds of this request: whether it was sent (NewRequestData) and how many
  // of its blocks per group; reset by preemption.
  bool known_to_worker = false;
  std::vector<size_t> blocks_sent;
  bool resumed = false;  // preempted since the worker last saw it
  // The stop token id that ended it, when one of its own stop_token_ids did.
  std::optional<int32_t> stop_token_id;
  bool remote_decode = false;
  // Cleared once its load has been decided (loaded, or given up for a local prefill).
  std::optional<RemotePrefill> remote_prefill;
  uint64_t kv_load_id = 0;        // its load (kWaitingForRemoteKvs)
  bool kv_load_reported = false;  // the workers are done writing its blocks
  int64_t kv_hit_tokens = 0;      // its local prefix hit when the load started
  // Linear-attention models under PD, checkpoint slots taken for the request's state before
  // its prompt's last token (kv/state_checkpoints.h take()): a producer's, written by the step
  // that reaches that token and leased with its blocks; a consumer's, written by its load and
  // copied into its own state slot by the step it resumes with.
  int32_t held_state = -1;
  int32_t loaded_state = -1;
  // Linear-attention models: its running state slot, one of [0, max_num_seqs), from the step
  // that first computes it until it finishes or is preempted (-1: none).
  int32_t running_slot = -1;

  int64_t num_tokens() const { return static_cast<int64_t>(all_token_ids.size()); }
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_token_ids.size()); }
  bool is_finished() const { return is_finished_status(status); }
  void append_output_token(int32_t token);
};

}  // namespace kestrel
