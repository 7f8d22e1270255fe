// engine/engine_core.h — the synchronous engine loop: a Scheduler deciding each step's work and
// applying the stop rules (EOS, stop ids, min/max tokens) to every sampled token, an Executor
// computing it, and the per-request state neither of them holds: structured-output constraints
// (their token masks go out with each step), reported prompt logprobs and timing.
// Single-threaded; the caller drives step(). Stop strings need text, so they are the
// EngineClient's business (engine/output_processor.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/request_table.h"
#include "base/status.h"
#include "engine/executor.h"
#include "engine/kv_connector.h"
#include "engine/token_constraint.h"
#include "model/causal_lm.h"
#include "sched/request_sampling.h"
#include "sched/scheduler.h"
#include "spec_decode/spec_decode_stats.h"

namespace kestrel {

struct EngineRequest {
  RequestHandle id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling;  // sampling.logprobs >= 0 asks for per-token logprobs
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // stop tokens are suppressed until this many outputs exist
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  uint64_t seed = 0;
  // -1: none; N >= 0: every prompt token after the first scored with the top N alternatives
  // (such requests never read the prefix cache).
  int prompt_logprobs = -1;
  // Structured output: limits which tokens may be sampled (engine thread only).
  std::shared_ptr<TokenConstraint> constraint;
  LogitsRules logits_rules;  // applied to each sampled row before the constraint
  // Mixed into the request's block hashes (a hashed cache_salt): prefix-cache isolation.
  std::vector<uint64_t> cache_keys;
  // Prefill/decode disaggregation (engine/kv_connector.h); ignored without a connector.
  KvTransferParams kv_transfer;
};

enum class FinishReason { kStop, kLength, kAbort, kError };
// The OpenAI spelling: "stop", "length", "abort", "error".
const char* finish_reason_name(FinishReason reason);

struct EngineCoreOutput {
  RequestHandle id;
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprobs> new_logprobs;  // one per new token if the request asked for them
  // Prompt tokens scored since the previous output (prompt positions 1, 2, …, in order).
  std::vector<TokenLogprobs> prompt_logprobs;
  std::optional<FinishReason> finish_reason;
  std::string error;  // with FinishReason::kError: what went wrong for this request
  // With FinishReason::kError: the request itself cannot be served (its constraints exclude
  // every token), as opposed to a failure of the engine.
  bool invalid_request = false;
  // Set when one of the request's own stop_token_ids (not an EOS id) ended it, as vLLM's
  // stop_reason reports it.
  std::optional<int32_t> stop_token_id;
  // A PD decode instance gave the request back for want of KV blocks (finish_reason stop,
  // stop_reason "recomputed": the proxy continues it elsewhere).
  bool given_back = false;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  int64_t num_output_tokens = 0;
  // When the request was first scheduled (queue time = this − arrival); unset before that.
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;
  // A prefill for a remote decode, finished: where its KV waits (the response's
  // kv_transfer_params).
  std::optional<nlohmann::json> kv_transfer_params;
  bool finished() const { return finish_reason.has_value(); }
};

// Work done since start-up, for stats and benchmarks.
struct EngineCoreCounters {
  int64_t steps = 0;                   // steps that ran the model
  int64_t scheduled_tokens = 0;        // tokens through the model (vllm:iteration_tokens_total)
  int64_t prompt_tokens_computed = 0;  // of those, prompt positions (prefix hits excluded)
  int64_t generation_tokens = 0;       // tokens sampled
  SpecDecodeStats spec_decode;         // drafts verified and accepted (vllm:spec_decode_*)
};

class EngineCore {
 public:
  // eos_token_ids: the model's generation defaults. The config must pass validate(). The first
  // form runs the model in this thread (InProcessExecutor), with drafts from `speculation`'s
  // proposer when it has one (config.num_lookahead_tokens must then be the proposer's).
  EngineCore(CausalLM& model, const SchedulerConfig& config, std::vector<int32_t> eos_token_ids,
             Speculation speculation = {});
  EngineCore(std::unique_ptr<Executor> executor, const SchedulerConfig& config,
             std::vector<int32_t> eos_token_ids);

  Status add_request(const EngineRequest& request);
  // Ends a request in any state; its "abort" output comes with the next step(). Unknown or
  // finished ids are ignored.
  void abort(RequestHandle id);
  // Runs one scheduler step and returns what changed: new tokens and finished requests. A step
  // whose execution fails ends the requests it scheduled with FinishReason::kError; when the
  // executor has failed for good (Executor::failure) the step returns the error instead.
  Expected<std::vector<EngineCoreOutput>> step();
  // Data-parallel lockstep (engine/dp_lockstep.h): step() runs the executor even when nothing
  // is scheduled, so the workers still join the step's collectives.
  void set_execute_empty_steps(bool on) { execute_empty_steps_ = on; }
  // Prefill/decode disaggregation: the connector requests with kv_transfer_params go through.
  void set_kv_connector(std::unique_ptr<KvConnector> connector) {
    kv_connector_ = std::move(connector);
  }
  KvConnector* kv_connector() { return kv_connector_.get(); }
  const KvConnector* kv_connector() const { return kv_connector_.get(); }
  // Applies what the connector learnt since (leases ended, releases answered) without a step;
  // requests that fail by it get their outputs with the next step(). step() does it too.
  void poll_kv();
  // When the engine thread must wake at the latest with nothing else to do (a lease expiry).
  std::chrono::steady_clock::time_point next_deadline() const {
    return kv_connector_ ? kv_connector_->next_deadline()
                         : std::chrono::steady_clock::time_point::max();
  }
  // Whether the only work left waits on others (KV loads, lease answers): the caller may pause
  // briefly between steps instead of spinning.
  bool only_waiting() const {
    return scheduler_.num_running() == 0 && scheduler_.num_waiting() == scheduler_.num_loading() &&
           pending_.empty();
  }
  // Why the group the executor belongs to failed, if it has: a step that fails then stops the
  // engine with that cause rather than the step's own error.
  void set_failure_cause(std::function<std::optional<std::string>()> cause) {
    failure_cause_ = std::move(cause);
  }
  // Work left: requests to run, or finished ones the workers have yet to drop (one more step).
  bool has_unfinished() const {
    return scheduler_.has_unfinished() || scheduler_.has_finished_to_send() || !pending_.empty() ||
           (kv_connector_ && kv_connector_->busy());
  }

  const Scheduler& scheduler() const { return scheduler_; }
  const EngineCoreCounters& counters() const { return counters_; }
  const Executor& executor() const { return *executor_; }

 private:
  struct RequestState {
    bool wants_logprobs = false;
    std::shared_ptr<TokenConstraint> constraint;
    std::optional<std::chrono::steady_clock::time_point> first_scheduled;
    // Prompt tokens already reported; a recompute after preemption scores them again.
    size_t prompt_logprobs_sent = 0;
  };

  // Token masks of the step's constrained requests that sample, one per position when they
  // verify drafts: the drafts are walked through the constraint (then restored) and cut at the
  // first one it refuses. A constraint that throws gets an empty mask and no drafts (its
  // request samples nothing) and its error in `errors`.
  void fill_token_masks(SchedulerOutput& sched,
                        std::unordered_map<RequestHandle, std::string>& errors);
  // Feeds the sampled tokens to their constraints; a refused token fails its request.
  void accept_constrained(RunnerOutput& result);
  // Ends (and retires) the requests the runner failed, before the step is applied.
  void end_failed(const RunnerOutput& result,
                  const std::unordered_map<RequestHandle, std::string>& mask_errors,
                  std::vector<EngineCoreOutput>& outputs);
  // The step's prompt logprobs of `id` (scored from position `start`) not reported before.
  std::vector<TokenLogprobs> fresh_prompt_logprobs(RequestHandle id, int64_t start,
                                                   std::vector<TokenLogprobs>& scored);
  EngineCoreOutput output_for(RequestHandle id) const;
  // Releases a finished request everywhere so no state or block outlives it.
  void retire(RequestHandle id);
  // A failed step ends only the requests it scheduled (with `error`); the engine keeps serving.
  void fail_step(const SchedulerOutput& sched, const std::string& error,
                 std::vector<EngineCoreOutput>& outputs);

  // First: destroyed after the executor, whose KV servers answer through its lease registry.
  std::unique_ptr<KvConnector> kv_connector_;
  Scheduler scheduler_;
  std::unique_ptr<Executor> executor_;
  std::vector<int32_t> eos_token_ids_;
  RequestTable<RequestState> request_state_;
  std::vector<EngineCoreOutput> pending_;  // abort outputs waiting for the next step
  EngineCoreCounters counters_;
  bool execute_empty_steps_ = false;
  std::function<std::optional<std::string>()> failure_cause_;
};

}  // namespace kestrel
