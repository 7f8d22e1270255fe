// engine/executor.h — where the engine core sends each step: an Executor takes the scheduler's
// plain-data SchedulerOutput and returns the workers' RunnerOutput. Implementations:
// InProcessExecutor (engine/in_process_executor.h) runs one ModelRunner on the calling (engine)
// thread; MultiprocExecutor (engine/multiproc_executor.h) runs tensor-parallel ranks in worker
// processes, or a data-parallel rank on another node, behind the same call.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
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

}  // namespace kestrel
