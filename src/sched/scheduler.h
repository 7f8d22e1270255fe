// sched/scheduler.h — decides, each step, which tokens of which requests the model computes.
// One rule, after vLLM v1: every request's num_computed_tokens chases its num_tokens under a
// per-step token budget. That single rule covers prefill (many tokens), chunked prefill (part of
// them), decode (one token, or one plus its drafts), prefix hits (computed tokens for free) and
// recompute after preemption. Its output is plain data (SchedulerOutput); it reads the worker's
// only as plain data too (RunnerOutput). Only the engine thread calls it.
//
// Prefill/decode disaggregation (issue 21). A producer's request with remote_decode keeps its
// blocks when it finishes normally: they leave the request (its handle can be reused) and wait
// in take_held() for the engine to lease them to a consumer, and come back through free_held().
// A consumer's request with remote_prefill is admitted into kWaitingForRemoteKvs: it gets
// blocks for its whole prompt past its local prefix hit and a KvLoad in the step's output, is
// not computed while the workers load, and continues from its last prompt token once the
// engine decides the load good (kv_load_decided), or prefills locally what it lacks if not.
// Its blocks are never freed while a load writes them: a request that ends mid-load leaves them
// with the load until the workers report it (kv_load_reported).
//
// Models with linear-attention layers move the request's recurrent state as well, as it stands
// before the prompt's last token (the token the consumer computes again): the producer takes a
// checkpoint slot for it at admission, the step that reaches that token leaves the state there
// (a StateOpKind::kHold op), and the slot is held with the blocks; the consumer's load fills a
// checkpoint slot of its own, copied into the request's slot by its first step. Such a consumer
// does not start from its local prefix cache: the state comes whole from the producer.
//
// Every state slot of a linear-attention model is the scheduler's: each running request's slot
// (Request::running_slot, given when it is first scheduled and taken back when it finishes or is
// preempted), the prefix-cache checkpoints, and the held and loaded ones. The workers make the
// copies SchedulerOutput::state_ops lists and use ScheduledTokens::state_slot.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/request_table.h"
#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_cache_spec.h"
#include "sched/request.h"
#include "sched/runner_output.h"
#include "sched/scheduler_output.h"

namespace kestrel {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // token budget per step
  int64_t max_num_seqs = 64;              // running requests at most
  int64_t max_model_len = 4096;           // prompt plus outputs at most
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  int32_t block_size = 16;
  int32_t num_blocks = 1024;  // including the null block
  // Blocks reserved past each request's scheduled tokens, for proposers that write draft K/V
  // ahead (vLLM's num_lookahead_tokens); 0 without speculative decoding.
  int64_t num_lookahead_tokens = 0;
  // The KV cache groups (kv/kv_cache_spec.h: kind and sliding window matter here); empty: one
  // full-attention group. Every request gets one block table per group.
  std::vector<KVCacheSpec> kv_groups;
  // A PD decode instance (vLLM-Ascend's recompute_scheduler_enable on a kv_consumer): a running
  // request that must give up its blocks ends instead of waiting to prefill again here, and is
  // reported by take_given_back() — the proxy continues it elsewhere (stop_reason
  // "recomputed").
  bool give_back_preempted = false;
  // Models with linear-attention layers: a prefix hit must resume their recurrent state from a
  // checkpoint, held in state slots [max_num_seqs, max_num_seqs + num_state_checkpoints) of the
  // KV storage (the running requests' are [0, max_num_seqs)). With prefix caching on, a prefill
  // chunk that stops short of the prompt ends on a block boundary and one stops at the prompt's
  // last boundary, where the state is saved (vLLM's "align" mode); without checkpoints nothing
  // is hit.
  bool has_recurrent_state = false;
  int32_t num_state_checkpoints = 0;
};

// Ok when the config can make progress on every admissible request, else why not.
Status validate(const SchedulerConfig& config);

// What update_from_output() did to one request.
struct RequestUpdate {
  RequestHandle id;
  std::vector<int32_t> new_token_ids;  // appended this step, in order (after a stop: up to it)
  size_t num_rejected_drafts = 0;
  std::optional<RequestStatus> finished;  // kFinishedStopped or kFinishedLength
  std::optional<int32_t> stop_token_id;   // one of its own stop_token_ids ended it
};

class Scheduler {
 public:
  // The config must pass validate().
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a new request. Errors on a duplicate id, an empty prompt, max_tokens < 1, or a prompt
  // that leaves no room for an output within max_model_len.
  Status add_request(RequestSpec spec);

  // Speculative tokens to verify after the request's last token, replacing earlier ones, for its
  // next step (as far as budget and max_model_len allow). A step that samples it without them
  // (its admission or resumption, which take none) drops them: they followed an older token.
  void set_draft_tokens(RequestHandle id, std::vector<int32_t> draft_token_ids);

  // Picks this step's work: running requests first, then waiting ones in queue order.
  SchedulerOutput schedule();

  // Applies a computed step: advances computed tokens, rolls back the rejected drafts, appends
  // each request's sampled tokens in order applying its stop rules to every one (max_tokens and
  // max_model_len first, as vLLM; then EOS and stop ids once min_tokens outputs exist), and
  // finishes requests that stopped. Requests finished or aborted since `output` was made, and
  // those the runner failed, are skipped.
  std::vector<RequestUpdate> update_from_output(const SchedulerOutput& output,
                                                const RunnerOutput& result);

  // Ends a request in any state with a finished status and frees its blocks at once. A no-op
  // for unknown or already finished requests.
  void finish(RequestHandle id, RequestStatus status);
  void abort(RequestHandle id) { finish(id, RequestStatus::kFinishedAborted); }
  // The execution of `output`, the last schedule()'s, failed: every request it scheduled ends
  // (aborted), and the blocks published for it, never written, leave the prefix cache.
  void fail_step(const SchedulerOutput& output);

  // Producer: requests finished since the last call whose blocks are held, and the blocks.
  std::vector<std::pair<RequestHandle, HeldKv>> take_held();
  void free_held(const HeldKv& held);
  // Consumer: the workers finished load `load_id` (whatever its outcome): its blocks are no
  // longer written. Returns the request still waiting on it (to be decided), or none when it
  // ended meanwhile (its blocks are freed now).
  std::optional<RequestHandle> kv_load_reported(uint64_t load_id);
  // The verdict on a reported load: loaded (the request continues from its last prompt token),
  // or not — then with `recompute` it prefills locally what it lacks, without it ends (aborted).
  void kv_load_decided(RequestHandle id, bool loaded, bool recompute);
  // Loads started and not yet decided.
  size_t num_loading() const { return loading_.size(); }
  // Loads the workers have not reported yet, those of requests that ended meanwhile included:
  // steps must run to collect them (their blocks are freed then).
  size_t num_loads_in_flight() const { return loading_.size() + orphan_loads_.size(); }

  // Finished requests stay readable until released.
  const Request* request(RequestHandle id) const;
  void release(RequestHandle id);

  // Loading requests count as waiting (as vLLM counts WAITING_FOR_REMOTE_KVS).
  size_t num_waiting() const { return waiting_.size() + loading_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_unfinished() const {
    return !waiting_.empty() || !running_.empty() || !loading_.empty() || !orphan_loads_.empty();
  }
  // Requests finished since the last schedule(), which the worker has not heard of yet.
  bool has_finished_to_send() const { return !finished_since_last_step_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // give_back_preempted: the requests ended for want of blocks since the last call.
  std::vector<RequestHandle> take_given_back() { return std::exchange(given_back_, {}); }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const std::vector<Request*>& running() const { return running_; }
  const KVCacheManager& kv() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  // Records `num_new` tokens of `req` (drafts included) in `out`: the work, and the request's
  // data for the worker (new, or the blocks added since it last saw it).
  void add_to_output(Request& req, int64_t num_new, SchedulerOutput& out);
  // Offers the request's blocks that this step's tokens fill to the prefix cache (never ones
  // holding draft tokens, which may be rejected).
  void publish_blocks(const Request& req, int64_t num_new_tokens);
  // Tokens the request may compute this step within `budget` and max_model_len: the rest of its
  // known tokens, then its drafts once it reaches its last token.
  int64_t num_to_schedule(const Request& req, int64_t budget) const;
  // Linear-attention models with prefix caching: num_new tokens from `start` cut to end on a
  // block boundary (see SchedulerConfig::has_recurrent_state).
  int64_t align_to_checkpoint(const Request& req, int64_t start, int64_t num_new) const;
  // Reserves a checkpoint for the state after this step's tokens of `req` when they end on a
  // block boundary (before the prompt's last token; past it, one kept per request for a step
  // without drafts), and asks the worker to save it.
  void save_checkpoint(Request& req, int64_t num_new, SchedulerOutput& out);
  // After a step with drafts: the last block boundary past the prompt that its kept tokens
  // reached, to be saved from the state the step left there (see pending_snapshot_saves_).
  void note_snapshot_save(const Request& req, int64_t start, const ScheduledTokens& work,
                          int64_t num_accepted);
  // A checkpoint slot for the state after the blocks hashed `hash`, in place of the request's
  // previous decoding checkpoint (one per request; `req` null: a request already gone).
  std::optional<int32_t> replace_decode_checkpoint(Request* req, const BlockHash& hash);
  // The noted saves into this step's output (before its forward pass).
  void take_snapshot_saves(SchedulerOutput& out);
  // Frees the newest running request and requeues it at the front of the waiting queue.
  Request* preempt_newest();
  // give_back_preempted: the newest running request ends (finished, its blocks freed).
  Request* give_back_newest();
  void remove_from_queues(Request* req);
  // Appends `token` to a running request and says whether it ends the request.
  Request* find_request(RequestHandle id) const;
  // Extends req.block_hashes over its tokens' new full blocks (prefix caching only).
  void update_block_hashes(Request& req) const;
  bool append_and_check_stop(Request& req, int32_t token, RequestUpdate& update);
  // Admits the front waiting request, which loads its prompt remotely: false when the pool has
  // no room for it now.
  bool admit_remote(Request& req, SchedulerOutput& out);
  // Moves loaded (or given-up) requests that are ready into running_, while there is room.
  void run_ready_loads();
  // Linear-attention models under PD: whether the request (a producer's) keeps its state for a
  // transfer, and the state copies its step of num_new tokens makes (see Request::held_state).
  bool holds_state(const Request& req) const {
    return req.remote_decode && config_.has_recurrent_state;
  }
  void transfer_state(Request& req, int64_t num_new, SchedulerOutput& out);
  // Linear-attention models: gives a request about to be computed a running state slot if it
  // has none, and takes one back (finish, preemption). The workers' copies from a finished
  // request's slot (its last snapshot save) precede any later use in the step's state_ops.
  void take_running_slot(Request& req);
  void put_back_running_slot(Request& req);
  // Gives back the request's transfer state slots that no step or load uses any more.
  void put_back_states(Request& req);

  SchedulerConfig config_;
  KVCacheManager kv_;
  RequestTable<std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order: the back is the newest
  std::vector<RequestHandle> finished_since_last_step_;
  // Speculative decoding on linear-attention models: a step's drafts leave the state at a block
  // boundary among its kept tokens only in the worker's draft snapshots (or its slot), and that
  // block's hash is known only once the tokens are: the next step saves it before its forward.
  struct SnapshotSave {
    RequestHandle id;
    BlockHash hash;
    int32_t slot;      // the request's running slot in that step
    int32_t snapshot;  // -1: the slot itself
  };
  std::vector<SnapshotSave> pending_snapshot_saves_;
  std::vector<BlockId> published_;  // blocks the last schedule() published to the prefix cache
  std::vector<Request*> loading_;   // kWaitingForRemoteKvs, in admission order
  std::vector<Request*> ready_;     // loads decided, waiting for room in running_
  // Loads whose request ended while the workers wrote its blocks: the blocks, until reported.
  std::unordered_map<uint64_t, HeldKv> orphan_loads_;
  std::vector<std::pair<RequestHandle, HeldKv>> held_;
  // Consumers' loaded states copied into their requests' slots by the last step: free again at
  // the next schedule().
  std::vector<int32_t> copied_states_;
  std::vector<int32_t> free_running_slots_;  // linear-attention models: [0, max_num_seqs)
  uint64_t next_load_id_ = 1;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  std::vector<RequestHandle> given_back_;
};

}  // namespace kestrel
