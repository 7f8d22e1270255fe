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
#include "engine/protocol.h"
#include "engine/token_constraint.h"
#include "sched/scheduler.h"

namespace kestrel {

class EngineCore {
 public:
  // eos_token_ids: the model's generation defaults. The config must pass validate() and
  // describe the executor's KV storage (with drafts, num_lookahead_tokens must be its
  // proposer's).
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
