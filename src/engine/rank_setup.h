// engine/rank_setup.h — what the engine builder (engine/engine_builder.cc) puts each rank
// together from: the names and communicators of a tensor-parallel group, a rank's load options
// and models (the target's shard and a draft model), its proposer, its KV plan; and the entry
// point of a tensor-parallel worker process. Set-up only, on the thread that builds the engine
// (or the worker process's main thread).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "distributed/device_comm.h"
#include "distributed/shm_comm.h"
#include "engine/dp_group.h"
#include "engine/engine_config.h"
#include "engine/multiproc_executor.h"
#include "model/loader.h"
#include "runner/model_runner.h"
#include "spec_decode/proposer.h"
#include "spec_decode/speculative_config.h"

namespace kestrel {

// How long a rank waits at one collective for the others (a dead rank's group is aborted at
// once; this bounds a hung one).
constexpr std::chrono::seconds kCollectiveTimeout{60};

// Names unique to a tensor-parallel group: its shared-memory segment and control socket.
struct GroupNames {
  std::string shm, endpoint;
};
GroupNames group_names(int dp_rank);

// Compute threads of each rank: the budget (threads, else every CPU the process may use) shared
// among the local ranks.
int threads_per_rank(const EngineConfig& config);

// Data-parallel rank `dp_rank`'s TP rank `rank`; under expert parallelism across the
// data-parallel ranks, `ep_comm` joins it to the ranks of its TP index.
LoadOptions load_options(const EngineConfig& config, int rank, DeviceComm* comm, int dp_rank,
                         DeviceComm* ep_comm);

// TP rank `rank`'s place in the group's shared-memory collectives.
Expected<std::unique_ptr<ShmComm>> connect_group(const EngineConfig& config,
                                                 const GroupNames& names, int rank,
                                                 const std::atomic<bool>* abort);

// The KV plan a rank's workers build their storage with: the scheduler's numbers.
WorkerKvPlan kv_plan(const SchedulerConfig& scheduler);

// One engine rank's models: its shard of the target and, for draft_model speculation, the whole
// draft model on the same backend.
struct RankModels {
  std::unique_ptr<LoadedModel> model, draft;
};
// `spec` (parsed from the config) comes back resolved against the target.
Expected<RankModels> load_rank_models(const LoadOptions& options,
                                      std::optional<SpeculativeConfig>& spec);

ProposerOptions proposer_options(const std::optional<SpeculativeConfig>& spec,
                                 const SchedulerConfig& scheduler, const LoadedModel* draft);
// A rank's proposer over `num_blocks` blocks (none without speculation).
Expected<Speculation> make_speculation(const std::optional<SpeculativeConfig>& spec,
                                       ProposerOptions options, CausalLM& model,
                                       int64_t num_blocks);

// The instance's KV transfer settings with this start's sizes (none without a transfer config).
std::optional<KvInstance> kv_instance(const EngineConfig& config);

// A tensor-parallel worker process's whole life: loads rank `rank`'s shard and runs the steps
// rank 0 sends until rank 0 stops it (returns the process's exit status). Under expert
// parallelism across the data-parallel ranks (`experts`) it also joins the ranks of its TP
// index.
// `spec` is the parsed speculative config.
int run_tp_worker(const EngineConfig& config, std::optional<SpeculativeConfig> spec,
                  const GroupNames& names, const DpGroup* experts, int dp_rank, int rank);

}  // namespace kestrel
