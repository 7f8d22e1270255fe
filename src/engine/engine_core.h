// engine/engine_core.h — the synchronous engine loop: a Scheduler deciding each step's work, a
// ModelRunner computing it, and the stop rules (EOS, stop ids, min/max tokens) applied to every
// sampled token. Single-threaded; the caller drives step().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/sampling.h"
#include "base/status.h"
#include "model/causal_lm.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"

namespace kestrel {

struct EngineRequest {
  RequestId id;
  std::vector<int32_t> prompt_token_ids;
  cpu::SamplingParams sampling;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // stop tokens are suppressed until this many outputs exist
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  uint64_t seed = 0;
};

struct RequestOutput {
  RequestId id;
  std::vector<int32_t> new_token_ids;
  std::vector<float> new_logprobs;           // of each new token
  std::optional<std::string> finish_reason;  // "stop" | "length" | "abort" once finished
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  int64_t num_output_tokens = 0;
  bool finished() const { return finish_reason.has_value(); }
};

class EngineCore {
 public:
  // eos_token_ids: the model's generation defaults. The config must pass validate().
  EngineCore(CausalLM& model, const SchedulerConfig& config, std::vector<int32_t> eos_token_ids);

  Status add_request(const EngineRequest& request);
  // Ends a request in any state; its "abort" output comes with the next step(). Unknown or
  // finished ids are ignored.
  void abort(const RequestId& id);
  // Runs one scheduler step and returns what changed: new tokens and finished requests.
  Expected<std::vector<RequestOutput>> step();
  bool has_unfinished() const { return scheduler_.has_unfinished() || !pending_.empty(); }

  const Scheduler& scheduler() const { return scheduler_; }
  const ModelRunner& runner() const { return runner_; }

 private:
  struct StopRules {
    int64_t min_tokens = 0;
    std::vector<int32_t> stop_token_ids;  // EOS ids included unless ignore_eos
  };

  bool is_stop(const StopRules& rules, int64_t num_outputs, int32_t token) const;
  // Releases a finished request everywhere so no state or block outlives it.
  void retire(const RequestId& id);

  Scheduler scheduler_;
  ModelRunner runner_;
  std::vector<int32_t> eos_token_ids_;
  std::unordered_map<RequestId, StopRules> stop_rules_;
  std::vector<RequestOutput> pending_;  // abort outputs waiting for the next step
};

}  // namespace kestrel
