// sched/scheduler.h — decides, each step, which tokens of which requests the model computes.
// One rule, after vLLM v1: every request's num_computed_tokens chases its num_tokens under a
// per-step token budget. That single rule covers prefill (many tokens), chunked prefill (part of
// them), decode (one token), prefix hits (computed tokens for free) and recompute after
// preemption. Only the engine thread calls it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "sched/request.h"
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
};

// Ok when the config can make progress on every admissible request, else why not.
Status validate(const SchedulerConfig& config);

class Scheduler {
 public:
  // The config must pass validate().
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a new request. Errors on a duplicate id, an empty prompt, max_tokens < 1, or a prompt
  // that leaves no room for an output within max_model_len.
  // `read_prefix_cache` false: the prompt is always computed (prompt logprobs need every
  // position's logits); its blocks are still offered to the cache.
  // `cache_keys` go into every block hash of the request (see Request::cache_keys).
  Status add_request(const RequestId& id, std::vector<int32_t> prompt, int64_t max_tokens,
                     bool read_prefix_cache = true, std::vector<uint64_t> cache_keys = {});

  // Picks this step's work: running requests first, then waiting ones in queue order.
  SchedulerOutput schedule();

  // Applies a computed step: advances computed tokens, appends the sampled token of every
  // scheduled request that was not a prefill chunk (sampled[id]) and finishes requests that reached
  // max_tokens or max_model_len. Requests finished or aborted since `output` was made are skipped.
  // Returns the ids it finished.
  std::vector<RequestId> update_from_output(const SchedulerOutput& output,
                                            const std::unordered_map<RequestId, int32_t>& sampled);

  // Ends a request in any state with a finished status (e.g. a stop token seen by the engine) and
  // frees its blocks at once. A no-op for unknown or already finished requests.
  void finish(const RequestId& id, RequestStatus status);
  void abort(const RequestId& id) { finish(id, RequestStatus::kFinishedAborted); }
  // The forward pass of `output` failed: every request it scheduled ends (aborted), and the
  // blocks published for it that were never written leave the prefix cache.
  void fail_step(const SchedulerOutput& output);

  // Finished requests stay readable until released.
  const Request* request(const RequestId& id) const;
  void release(const RequestId& id);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const std::vector<Request*>& running() const { return running_; }
  const KVCacheManager& kv() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  ScheduledRequest make_scheduled(const Request& req, int64_t num_new_tokens) const;
  // Offers the request's blocks that this step's tokens fill to the prefix cache.
  void publish_blocks(const Request& req, int64_t num_new_tokens);
  // Frees the newest running request and requeues it at the front of the waiting queue.
  Request* preempt_newest();
  void remove_from_queues(Request* req);

  SchedulerConfig config_;
  KVCacheManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order: the back is the newest
  std::vector<RequestId> finished_since_last_step_;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace kestrel
