// engine/multiproc_executor.h — tensor parallelism over worker processes (issue 20, vLLM's mp
// backend): rank 0 schedules and runs its own ModelRunner on the engine thread; every step's
// SchedulerOutput goes, msgpack-encoded (sched/contract_codec.h), to the workers (ranks 1 ..
// N-1, engine/worker_processes.h) over the control channel (distributed/host_comm.h); all ranks run
// the step together, their layers meeting at the model's collectives, and each returns its
// RunnerOutput. The model's results are the same bits on every rank (model/tp_group.h), so
// every rank samples the same tokens; rank 0 checks that the workers' outputs equal its own and
// returns its own. The same executor drives a data-parallel rank on another host (--headless):
// no local runner, one worker (that host's executor) reached over TCP.
//
// A worker that dies, fails where rank 0 did not, or computes something else fails the group
// for good: that step and every later one return the error, and failure() says why (the engine
// then stops and /health turns 503). Owned by the engine thread; failure() is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "distributed/host_comm.h"
#include "engine/executor.h"
#include "engine/worker_processes.h"
#include "runner/model_runner.h"

namespace kestrel {

// What the leader's KV budget decided and every rank's storage must hold the same of: the
// block pool, and for linear-attention models the state slots (one per running request, the
// scheduler's max_num_seqs) and prefix-cache checkpoints, whose slot ids the scheduler hands out.
struct WorkerKvPlan {
  int32_t num_blocks = 0;
  int32_t num_state_slots = 0;
  int32_t num_state_checkpoints = 0;
};

class MultiprocExecutor final : public Executor {
 public:
  // How long the workers of a healthy group get to exit after being told to.
  static constexpr std::chrono::milliseconds kQuitGrace{5000};

  // `workers` already connected (wait_for_workers). Sends them the KV plan and waits until each
  // has built its runner: an error says which rank failed and why. Without `processes` the
  // workers run elsewhere (a data-parallel rank on another host: its liveness is its connection);
  // without `runner` this process computes nothing and the first worker's answer is the step's.
  // `step_timeout` bounds the wait for the workers' answers to one step after this process's own
  // part (vLLM's VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS): a stuck worker, or a remote rank's whole
  // step.
  static Expected<std::unique_ptr<MultiprocExecutor>> start(
      std::unique_ptr<WorkerProcesses> processes, std::unique_ptr<HostCommLeader> workers,
      std::unique_ptr<ModelRunner> runner, const WorkerKvPlan& plan,
      std::chrono::milliseconds timeout,
      std::chrono::milliseconds step_timeout = std::chrono::seconds(300));
  // Tells the workers to exit and waits for them.
  ~MultiprocExecutor() override;

  Expected<RunnerOutput> execute(const SchedulerOutput& output) override;
  std::optional<std::string> failure() const override;

 private:
  MultiprocExecutor(std::unique_ptr<WorkerProcesses> processes,
                    std::unique_ptr<HostCommLeader> workers, std::unique_ptr<ModelRunner> runner,
                    std::chrono::milliseconds step_timeout);
  // Records the group's failure and returns it as the step's error.
  Error fail(const std::string& why);
  Status check_alive() const;

  // Every rank's loads reported in `outputs` (this rank's first), tallied across steps: a load
  // is the step's once every rank has reported it (failed if any failed).
  std::vector<KvLoadResult> tally_loads(std::vector<std::vector<KvLoadResult>> outputs);

  std::unique_ptr<WorkerProcesses> processes_;
  std::unique_ptr<HostCommLeader> workers_;
  std::unique_ptr<ModelRunner> runner_;
  const std::chrono::milliseconds step_timeout_;
  struct LoadTally {
    size_t ranks = 0;
    KvLoadResult result{0, true, "", 0};
  };
  std::map<uint64_t, LoadTally> loads_;
  mutable std::mutex mu_;
  std::optional<std::string> failure_;
};

// A worker's side: waits for the leader's KV plan, builds what runs its part of each step
// with `make_executor(plan)` (a TP worker: an InProcessExecutor of its shard; a
// data-parallel rank on another host: its own executor, a TP group there), says it is ready,
// then runs each step the leader sends until told to stop. Returns the exit status (0: told to
// stop).
int run_worker(
    HostCommWorker& leader,
    const std::function<Expected<std::unique_ptr<Executor>>(const WorkerKvPlan&)>& make_executor);

}  // namespace kestrel
