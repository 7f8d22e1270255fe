#include "engine/rank_setup.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include "base/logging.h"

namespace kestrel {

GroupNames group_names(int dp_rank) {
  const uint64_t nonce = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  const std::string tag = fmt::format("kestrel-tp-{}-dp{}-{:x}", ::getpid(), dp_rank, nonce);
  return GroupNames{"/" + tag, "ipc:///tmp/" + tag + ".sock"};
}

// Compute threads of each rank: the budget (--threads, else every CPU the process may use)
// shared among the local ranks.
int threads_per_rank(const EngineConfig& a) {
  int total = a.threads;
  if (total <= 0) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    total = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                ? CPU_COUNT(&allowed)
                : int(std::max(1u, std::thread::hardware_concurrency()));
  }
  return std::max(1, total / (a.tensor_parallel_size * a.local_data_parallel_ranks()));
}

// Data-parallel rank `dp_rank`'s TP rank `rank`; under expert parallelism across the
// data-parallel ranks, `ep_comm` joins it to the ranks of its TP index.
LoadOptions load_options(const EngineConfig& a, int rank, DeviceComm* comm, int dp_rank,
                         DeviceComm* ep_comm) {
  LoadOptions lo;
  lo.model = a.model;
  lo.load_format = a.load_format;
  lo.dtype = a.dtype;
  lo.kv_cache_dtype = a.kv_cache_dtype;
  lo.calculate_kv_scales = a.calculate_kv_scales;
  lo.quant_compute = a.quant_compute;
  lo.quantization = a.quantization;
  lo.pd_decode = a.kv && a.kv->transfer.role == KvRole::kConsumer;
  const bool shared = a.tensor_parallel_size > 1 || a.local_data_parallel_ranks() > 1;
  lo.threads = shared ? threads_per_rank(a) : a.threads;
  lo.pin_threads = a.pin_threads;
  lo.seed = a.seed;
  lo.tp_rank = rank;
  lo.tp_size = a.tensor_parallel_size;
  lo.tp_comm = comm;
  lo.expert_parallel = a.enable_expert_parallel;
  if (ep_comm != nullptr) {
    lo.dp_rank = dp_rank;
    lo.dp_size = a.data_parallel_size;
    lo.ep_comm = ep_comm;
  }
  return lo;
}

Expected<std::unique_ptr<ShmComm>> connect_group(const EngineConfig& a, const GroupNames& names,
                                                 int rank, const std::atomic<bool>* abort) {
  ShmCommOptions co;
  co.name = names.shm;
  co.rank = rank;
  co.size = a.tensor_parallel_size;
  co.timeout = kCollectiveTimeout;
  co.abort = abort;
  return ShmComm::connect(co);
}

// The KV plan a rank's workers build their storage with: the scheduler's numbers.
WorkerKvPlan kv_plan(const SchedulerConfig& sc) {
  return WorkerKvPlan{sc.num_blocks, int32_t(sc.max_num_seqs), sc.num_state_checkpoints};
}

Expected<RankModels> load_rank_models(const LoadOptions& lo,
                                      std::optional<SpeculativeConfig>& spec) {
  RankModels m;
  KASSIGN(m.model, load_model(lo));
  if (!spec) return m;
  KTRY(resolve_speculative_config(*spec, m.model->model->num_mtp_modules(),
                                  m.model->config.model_type));
  if (spec->method == SpeculativeMethod::kDraftModel) {
    LoadOptions dl = lo;
    dl.model = spec->draft_model;
    dl.load_format = "auto";
    dl.kv_cache_dtype = "auto";
    dl.quantization = "";  // the draft checkpoint says
    dl.shared_backend = &m.model->model->backend();
    dl.tp_rank = 0;  // every rank runs the whole draft model
    dl.tp_size = 1;
    dl.tp_comm = nullptr;
    dl.expert_parallel = false;
    dl.dp_rank = 0;
    dl.dp_size = 1;
    dl.ep_comm = nullptr;
    KASSIGN(m.draft, load_model(dl));
    if (m.draft->config.linear.enabled())
      return make_error(
          "--speculative-config: draft model {} has linear-attention layers, whose state the "
          "draft model proposer does not roll back; use a draft model with attention layers "
          "only, or method mtp",
          m.draft->config.architecture);
  }
  return m;
}

ProposerOptions proposer_options(const std::optional<SpeculativeConfig>& spec,
                                 const SchedulerConfig& sc, const LoadedModel* draft) {
  ProposerOptions po;
  if (!spec) return po;
  po.config = *spec;
  po.max_model_len = sc.max_model_len;
  po.block_size = sc.block_size;
  po.draft_model = draft ? draft->model.get() : nullptr;
  return po;
}

// A rank's proposer over `num_blocks` blocks (none without speculation).
Expected<Speculation> make_speculation(const std::optional<SpeculativeConfig>& spec,
                                       ProposerOptions po, CausalLM& model, int64_t num_blocks) {
  Speculation s;
  if (!spec) return s;
  po.num_blocks = num_blocks;
  KASSIGN(s.proposer, make_proposer(model, po));
  s.max_drafting_requests =
      spec->disable_by_batch_size.value_or(default_max_drafting_requests(spec->k()));
  return s;
}

// The instance's KV transfer settings with this start's sizes (none without
// --kv-transfer-config).
std::optional<KvInstance> kv_instance(const EngineConfig& a) {
  std::optional<KvInstance> kv = a.kv;
  if (kv) {
    kv->dp_size = a.data_parallel_size;
    kv->tp_size = a.tensor_parallel_size;
    kv->block_size = a.block_size;
  }
  return kv;
}

}  // namespace kestrel
