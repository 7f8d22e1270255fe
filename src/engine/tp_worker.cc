// The tensor-parallel worker process (engine/rank_setup.h, run_tp_worker): it loads its shard
// and serves rank 0's steps.
#include <unistd.h>

#include "base/logging.h"
#include "distributed/host_comm.h"
#include "engine/in_process_executor.h"
#include "engine/kv_ranks.h"
#include "engine/rank_setup.h"

namespace kestrel {

int run_tp_worker(const EngineConfig& a, std::optional<SpeculativeConfig> spec,
                  const GroupNames& names, const DpGroup* experts, int dp_rank, int rank) {
  set_log_prefix(a.data_parallel_size > 1
                     ? fmt::format("(Worker DP{} rank={} pid={})", dp_rank, rank, ::getpid())
                     : fmt::format("(Worker rank={} pid={})", rank, ::getpid()));
  auto fail = [](const Error& e) {
    KLOG_ERROR("{}", e.message);
    return 1;
  };
  auto comm = connect_group(a, names, rank, experts ? &experts->abort() : nullptr);
  if (!comm.ok()) return fail(comm.error());
  auto leader = HostCommWorker::connect(names.endpoint, rank);
  if (!leader.ok()) return fail(leader.error());
  std::unique_ptr<DeviceComm> ep;
  if (experts != nullptr) {
    auto joined = experts->connect_experts(dp_rank, rank, {});
    if (!joined.ok()) return fail(joined.error());
    ep = std::move(*joined);
  }
  auto models = load_rank_models(load_options(a, rank, comm->get(), dp_rank, ep.get()), spec);
  if (!models.ok()) return fail(models.error());
  auto sc = scheduler_config(a, models->model->config);
  if (!sc.ok()) return fail(sc.error());
  const ProposerOptions po = proposer_options(spec, *sc, models->draft.get());
  CausalLM& model = *models->model->model;
  return run_worker(**leader, [&](const WorkerKvPlan& plan) -> Expected<std::unique_ptr<Executor>> {
    KASSIGN(Speculation s, make_speculation(spec, po, model, plan.num_blocks));
    // The leader's budget decided the state slots and checkpoints (its scheduler's numbers).
    auto executor =
        std::make_unique<InProcessExecutor>(model, plan.num_blocks, sc->block_size, std::move(s),
                                            plan.num_state_slots, plan.num_state_checkpoints);
    if (const auto kv = kv_instance(a)) {
      KASSIGN(auto worker, start_kv_worker(*kv, model, models->model->config,
                                           executor->runner().kv_memory(), dp_rank, rank));
      executor->runner().set_kv_worker(std::move(worker));
    }
    return std::unique_ptr<Executor>(std::move(executor));
  });
}

}  // namespace kestrel
