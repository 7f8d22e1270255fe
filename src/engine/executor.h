// engine/executor.h — where the engine core sends each step: an Executor takes the scheduler's
// plain-data SchedulerOutput and returns the workers' RunnerOutput. InProcessExecutor runs one
// ModelRunner on the calling (engine) thread; MultiprocExecutor (engine/multiproc_executor.h)
// runs tensor-parallel ranks in worker processes behind the same call.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/causal_lm.h"
#include "runner/model_runner.h"
#include "sched/runner_output.h"
#include "sched/scheduler_output.h"

namespace kestrel {

class Executor {
 public:
  virtual ~Executor() = default;
  // One step on every worker. An error fails the step (the engine core ends the requests it
  // scheduled and keeps serving); the workers' state must then still match the scheduler's.
  virtual Expected<RunnerOutput> execute(const SchedulerOutput& output) = 0;
  // Set once the executor can run no more steps (a worker process died): why. Thread-safe.
  virtual std::optional<std::string> failure() const { return std::nullopt; }
};

class InProcessExecutor final : public Executor {
 public:
  // num_state_slots, num_state_checkpoints: the linear-attention states the KV storage holds
  // (the scheduler's max_num_seqs and num_state_checkpoints; unused for models without such
  // layers).
  InProcessExecutor(CausalLM& model, int32_t num_blocks, int32_t block_size,
                    Speculation speculation = {}, int32_t num_state_slots = 0,
                    int32_t num_state_checkpoints = 0)
      : runner_(model,
                model.make_kv_cache(num_blocks, block_size, num_state_slots, num_state_checkpoints),
                std::move(speculation)) {}

  // An exception from the step (an allocation failure, a kernel's check) becomes its error.
  Expected<RunnerOutput> execute(const SchedulerOutput& output) override;
  const ModelRunner& runner() const { return runner_; }
  ModelRunner& runner() { return runner_; }

 private:
  ModelRunner runner_;
};

}  // namespace kestrel
