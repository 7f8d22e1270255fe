// engine/in_process_executor.h — the executor of a rank whose model runs in this process, on the
// engine thread that calls execute(): one ModelRunner over the rank's KV storage.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/executor.h"
#include "model/causal_lm.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"

namespace kestrel {

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

// `config` with `model`'s KV cache groups and whether it keeps recurrent state: what the
// scheduler allocates for.
SchedulerConfig with_model_kv_groups(SchedulerConfig config, const CausalLM& model);

// The executor of a one-rank engine over `model`, sized by `config` (blocks, block size, state
// slots and checkpoints), with drafts from `speculation`'s proposer when it has one.
std::unique_ptr<InProcessExecutor> make_in_process_executor(CausalLM& model,
                                                            const SchedulerConfig& config,
                                                            Speculation speculation = {});

}  // namespace kestrel
