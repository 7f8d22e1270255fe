#include "cli/engine_args.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "base/logging.h"
#include "distributed/host_comm.h"
#include "distributed/shm_comm.h"
#include "engine/dp_group.h"
#include "engine/multiproc_executor.h"
#include "engine/worker_processes.h"
#include "spec_decode/proposer.h"
#include "spec_decode/speculative_config.h"

namespace kestrel::cli {

namespace {

// The default token budget with chunked prefill (and at least max_num_seqs, so that every running
// decode fits a step). vLLM tunes this per platform (its CPU server default is 2,048, TPU v5e's
// 512). On the CPU a step of 512 tokens already runs the GEMMs at the speed of 2,048
// (docs/benchmarks.md, issue 18: prefill throughput equal or 3 % better), while each larger step
// holds every running decode and every queued prompt's first token for longer: in vLLM's
// `bench serve` race, 16 prompts at once, mean TTFT fell from 2.7 s to 1.4 s.
constexpr int64_t kDefaultChunkedBatchedTokens = 512;
// Without chunked prefill a step must hold a whole prompt: at least this, and max_model_len.
constexpr int64_t kDefaultMaxNumBatchedTokens = 2048;

// Workspace the forward pass keeps besides KV: per batched token the residual stream, attention
// and MLP intermediates (f32) — MoE: router scores and each token's k expert results; MLA: the
// per-head queries and latent outputs — plus one logits row per sequence.
int64_t activation_reserve(const ModelConfig& m, const SchedulerConfig& s) {
  int64_t values = 6 * m.hidden_size + 3 * m.intermediate_size +
                   (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim;
  if (m.moe.num_experts > 0)
    values += (m.moe.num_experts_per_tok + 3) * m.hidden_size + m.moe.num_experts +
              2 * std::max<int64_t>(1, m.moe.num_shared_experts) * m.moe.moe_intermediate_size;
  if (m.mla.enabled())
    values += m.num_attention_heads *
                  (2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim + m.mla.v_head_dim) +
              m.mla.q_lora_rank + m.mla.cache_width();
  return s.max_num_batched_tokens * 4 * values + s.max_num_seqs * m.vocab_size * 4;
}

}  // namespace

void add_engine_args(CLI::App& app, EngineArgs& a, bool model_required) {
  if (model_required) {
    app.add_option("--model,-m", a.model,
                   "model directory (config.json + safetensors) or .gguf file")
        ->required();
  }
  app.add_option("--tokenizer", a.tokenizer,
                 "tokenizer directory (tokenizer.json) or .gguf file; default: the model's");
  app.add_option("--load-format", a.load_format, "auto | safetensors | gguf | dummy");
  app.add_option("--dtype", a.dtype,
                 "activation (and dummy weight) dtype: auto | float32 | bfloat16 | float16");
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype,
                 "auto | fp32 | bf16 | fp16 | fp8 (= fp8_e4m3) | fp8_e5m2 | mxfp8 | int8 (an "
                 "msModelSlim C8 checkpoint's, which auto picks)");
  app.add_flag("--calculate-kv-scales", a.calculate_kv_scales,
               "fp8 KV caches without scales in the checkpoint: set them from the first batch");
  app.add_option("--quant-compute", a.quant_compute,
                 "quantized weights: int8 (activations quantized per block, as llama.cpp) | f32 "
                 "(blocks dequantized against f32 activations)");
  app.add_option("--threads,-t", a.threads, "compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  app.add_flag("--pin-threads", a.pin_threads,
               "bind each compute thread to one CPU of the process's affinity mask (a dedicated "
               "machine: no migrations between kernels)");
  app.add_option("--seed", a.seed, "default sampling seed and dummy-weight seed");
  app.add_option("--max-model-len", a.max_model_len,
                 "context length (prompt + output); default: the model's")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--max-num-seqs", a.max_num_seqs, "sequences per step at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                 "tokens per step at most (default: 512, or max-num-seqs if larger; without "
                 "chunked prefill, 2048 or max-model-len if larger)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--block-size", a.block_size, "tokens per KV block")
      ->check(CLI::IsMember({1, 8, 16, 32, 64, 128, 256}));
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", a.enable_prefix_caching,
               "reuse KV blocks of identical prompt prefixes (default on)");
  app.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", a.enable_chunked_prefill,
               "split long prompts over steps so decodes keep running (default on)");
  app.add_option("--kv-cache-memory,--kv-cache-memory-bytes", a.kv_cache_memory,
                 "KV cache size in bytes (suffixes k/m/g decimal, K/M/G binary)");
  app.add_option("--gpu-memory-utilization", a.gpu_memory_utilization,
                 "on the CPU: fraction of RAM for weights + activations + KV cache")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--log-level", a.log_level, "debug | info | warning | error");
  app.add_option("--tensor-parallel-size", a.tensor_parallel_size,
                 "tensor-parallel ranks, one worker process each (they share --threads)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--enable-expert-parallel,!--no-enable-expert-parallel", a.enable_expert_parallel,
               "MoE: whole experts spread over every data- and tensor-parallel rank, routed rows "
               "exchanged between them (instead of every expert split by features)");
  app.add_option("--data-parallel-size", a.data_parallel_size,
                 "data-parallel ranks: engines with their own scheduler and KV cache, requests "
                 "balanced by load (they share --threads)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--distributed-executor-backend", a.distributed_executor_backend,
                 "mp (worker processes; the default) | uni (one process: TP 1 only); ray and "
                 "external_launcher are refused")
      ->check(CLI::IsMember(std::vector<std::string>{"mp", "uni", "ray", "external_launcher"}));
  app.add_option(
      "--speculative-config", a.speculative_config,
      "JSON: method (ngram | draft_model | mtp and its aliases), "
      "num_speculative_tokens, prompt_lookup_min/max, model, disable_by_batch_size, ...");
}

Expected<SchedulerConfig> scheduler_config(const EngineArgs& a, const ModelConfig& m) {
  SchedulerConfig c;
  c.max_model_len = a.max_model_len.value_or(m.max_position_embeddings);
  if (c.max_model_len > m.max_position_embeddings)
    return make_error(
        "User-specified max_model_len ({}) is greater than the derived max_model_len "
        "(max_position_embeddings={} in the model's config). Kestrel does not extrapolate "
        "beyond the trained context.",
        c.max_model_len, m.max_position_embeddings);
  c.max_num_seqs = a.max_num_seqs;
  c.enable_chunked_prefill = a.enable_chunked_prefill;
  c.enable_prefix_caching = a.enable_prefix_caching;
  c.has_recurrent_state = m.linear.enabled();
  c.block_size = a.block_size;
  c.give_back_preempted = a.give_back_preempted;
  c.max_num_batched_tokens = a.max_num_batched_tokens.value_or(
      a.enable_chunked_prefill ? std::max<int64_t>(kDefaultChunkedBatchedTokens, c.max_num_seqs)
                               : std::max(kDefaultMaxNumBatchedTokens, c.max_model_len));
  return c;
}

Status check_executor_backend(const EngineArgs& a) {
  const std::string& b = a.distributed_executor_backend;
  if (b == "ray" || b == "external_launcher")
    return make_error(
        "--distributed-executor-backend {}: not supported; Kestrel starts its own worker "
        "processes (use mp)",
        b);
  if (b == "uni" && a.tensor_parallel_size > 1)
    return make_error(
        "--distributed-executor-backend uni runs one process; --tensor-parallel-size {} needs mp "
        "(the default)",
        a.tensor_parallel_size);
  return Status::Ok();
}

namespace {

// How long rank 0 waits for its workers to load their shards and build their runners (vLLM's
// VLLM_ENGINE_READY_TIMEOUT_S default); a worker that exits fails the wait at once.
constexpr std::chrono::seconds kWorkerStartTimeout{600};
// How long a rank waits at one collective for the others (a dead rank's group is aborted at
// once; this bounds a hung one).
constexpr std::chrono::seconds kCollectiveTimeout{60};

// Names unique to this group: the shared-memory segment and the control socket.
struct GroupNames {
  std::string shm, endpoint;
};

GroupNames group_names(int dp_rank) {
  const uint64_t nonce = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  const std::string tag = fmt::format("kestrel-tp-{}-dp{}-{:x}", ::getpid(), dp_rank, nonce);
  return GroupNames{"/" + tag, "ipc:///tmp/" + tag + ".sock"};
}

// Compute threads of each rank: the budget (--threads, else every CPU the process may use)
// shared among the local ranks.
int threads_per_rank(const EngineArgs& a) {
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
LoadOptions load_options(const EngineArgs& a, int rank, DeviceComm* comm, int dp_rank,
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

Expected<std::unique_ptr<ShmComm>> connect_group(const EngineArgs& a, const GroupNames& names,
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

// `spec` comes back parsed and resolved against the target.
Expected<RankModels> load_rank_models(const EngineArgs& a, const LoadOptions& lo,
                                      std::optional<SpeculativeConfig>& spec) {
  RankModels m;
  KASSIGN(m.model, load_model(lo));
  KASSIGN(spec, parse_speculative_config(a.speculative_config));
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
std::optional<KvInstance> kv_instance(const EngineArgs& a) {
  std::optional<KvInstance> kv = a.kv;
  if (kv) {
    kv->dp_size = a.data_parallel_size;
    kv->tp_size = a.tensor_parallel_size;
    kv->block_size = a.block_size;
  }
  return kv;
}

// A worker process of the group: loads rank `rank`'s shard and runs the steps rank 0 sends.
// Under expert parallelism across the data-parallel ranks (`experts`) it also joins the ranks of
// its TP index.
int run_tp_worker(const EngineArgs& a, const GroupNames& names, const DpGroup* experts, int dp_rank,
                  int rank) {
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
  std::optional<SpeculativeConfig> spec;
  auto models = load_rank_models(a, load_options(a, rank, comm->get(), dp_rank, ep.get()), spec);
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

}  // namespace

namespace {

// Expert parallelism across the data-parallel ranks (a MoE model, --enable-expert-parallel and
// more than one data-parallel rank): the group this process takes part in; none otherwise
// (dense models ignore the flag, as vLLM's do).
Expected<std::unique_ptr<DpGroup>> plan_expert_group(const EngineArgs& a, bool headless) {
  if (!a.enable_expert_parallel || a.data_parallel_size < 2) return std::unique_ptr<DpGroup>();
  KASSIGN(const ModelConfig mc, read_model_config(a.model, a.load_format));
  if (mc.moe.num_experts == 0) return std::unique_ptr<DpGroup>();
  DpGroupSpec spec;
  spec.size = a.data_parallel_size;
  spec.serves = a.data_parallel_first == 0 && !headless;
  spec.all_local = spec.serves && a.local_data_parallel_ranks() == a.data_parallel_size;
  spec.address = a.data_parallel_address;
  spec.rpc_port = a.data_parallel_rpc_port;
  spec.start_timeout = kWorkerStartTimeout;
  spec.collective_timeout = kCollectiveTimeout;
  return DpGroup::plan(spec);
}

// What every data-parallel rank of an expert group must share: what shapes the collectives.
std::string lockstep_settings(const EngineArgs& a, const ModelConfig& mc) {
  return fmt::format("{} layers={} hidden={} experts={} tp={} dp={} dtype={}", mc.architecture,
                     mc.num_hidden_layers, mc.hidden_size, mc.moe.num_experts,
                     a.tensor_parallel_size, a.data_parallel_size, a.dtype);
}

// The local data-parallel ranks, loaded and ready: the engine (without its client yet) and the
// client's options, with an executor per local rank unless one in-process rank suffices.
struct Prepared {
  Engine engine;
  EngineClient::Options options;
};

Expected<Prepared> prepare_local_ranks(const EngineArgs& a, bool always_executors, bool headless) {
  set_log_level(a.log_level);
  KTRY(check_executor_backend(a));
  const int tp = a.tensor_parallel_size;
  const int dp = a.local_data_parallel_ranks();
  Prepared prepared;
  Engine& e = prepared.engine;
  KASSIGN(e.dp_group, plan_expert_group(a, headless));
  const DpGroup* experts = e.dp_group.get();
  // Lockstep ranks step through their executors, and KV transfer runs in a rank's runner.
  const std::optional<KvInstance> kv = kv_instance(a);
  always_executors = always_executors || experts != nullptr || kv.has_value();
  // Every data-parallel rank's workers first, before this process starts any thread: the
  // children are forks of it.
  std::vector<std::unique_ptr<WorkerProcesses>> workers(static_cast<size_t>(dp));
  std::vector<GroupNames> names(static_cast<size_t>(dp));
  if (tp > 1) {
    for (int d = 0; d < dp; ++d) {
      names[size_t(d)] = group_names(a.data_parallel_first + d);
      KASSIGN(workers[size_t(d)], WorkerProcesses::spawn(
                                      tp - 1,
                                      [&a, &names, experts, d](int rank) {
                                        return run_tp_worker(a, names[size_t(d)], experts,
                                                             a.data_parallel_first + d, rank);
                                      },
                                      experts ? &experts->abort() : nullptr));
    }
    for (int d = 0; d < dp; ++d) {
      // Under expert parallelism a failure anywhere in the group aborts the TP collectives too
      // (a worker's death sets the group's flag).
      KASSIGN(auto comm,
              connect_group(a, names[size_t(d)], 0,
                            experts ? &experts->abort() : &workers[size_t(d)]->abort_flag()));
      e.tp_comms.push_back(std::move(comm));
    }
  }
  // The local ranks' places in the expert group: TP rank 0 of each is here, its workers join
  // from their processes.
  if (experts != nullptr) {
    e.ep_comms.resize(size_t(dp));
    KTRY(e.dp_group->start());
    std::vector<Status> joined(static_cast<size_t>(dp));
    std::vector<std::thread> joining;
    for (int d = 0; d < dp; ++d)
      joining.emplace_back([&, d] {
        WorkerProcesses* procs = workers[size_t(d)].get();
        auto comm = experts->connect_experts(a.data_parallel_first + d, 0, [procs] {
          return procs ? procs->check() : Status::Ok();
        });
        if (comm.ok()) {
          e.ep_comms[size_t(d)] = std::move(*comm);
        } else {
          joined[size_t(d)] = comm.error();
        }
      });
    for (std::thread& t : joining) t.join();
    for (const Status& st : joined) KTRY(st);
  }
  if (tp > 1 || dp > 1)
    KLOG_INFO(
        "parallelism: {} data-parallel rank{} of {} tensor-parallel rank{} ({} process{}), {} "
        "compute thread{} each",
        dp, dp > 1 ? "s" : "", tp, tp > 1 ? "s" : "", 1 + dp * (tp - 1),
        dp * (tp - 1) > 0 ? "es" : "", threads_per_rank(a), threads_per_rank(a) > 1 ? "s" : "");
  std::optional<SpeculativeConfig> spec;
  std::vector<RankModels> ranks;
  for (int d = 0; d < dp; ++d) {
    DeviceComm* comm = tp > 1 ? e.tp_comms[size_t(d)].get() : nullptr;
    DeviceComm* ep = experts ? e.ep_comms[size_t(d)].get() : nullptr;
    KASSIGN(RankModels m,
            load_rank_models(a, load_options(a, 0, comm, a.data_parallel_first + d, ep), spec));
    ranks.push_back(std::move(m));
  }
  e.model = std::move(ranks[0].model);
  e.draft_model = std::move(ranks[0].draft);
  for (size_t d = 1; d < ranks.size(); ++d) e.more_ranks.push_back(std::move(ranks[d]));
  const ModelConfig& mc = e.model->config;
  KASSIGN(SchedulerConfig sc, scheduler_config(a, mc));

  if (!a.tokenizer.empty()) {
    KASSIGN(e.tokenizer, load_tokenizer(a.tokenizer));
  } else if (a.load_format != "dummy") {
    auto tok = e.model->gguf ? load_gguf_tokenizer(*e.model->gguf) : load_tokenizer(a.model);
    if (tok.ok()) {
      e.tokenizer = std::move(*tok);
    } else {
      KLOG_WARN("no tokenizer ({}); only token-id prompts will work", tok.error().message);
    }
  }
  if (spec) {
    if (spec->method == SpeculativeMethod::kMtp && spec->method_alias != "mtp")
      KLOG_WARN("method `{}` is deprecated and replaced with mtp.", spec->method_alias);
    sc.num_lookahead_tokens = spec->num_lookahead_tokens();
  }
  const ProposerOptions po = proposer_options(spec, sc, e.draft_model.get());

  KVBudgetRequest kr;
  if (a.kv_cache_memory) {
    KASSIGN(kr.kv_cache_memory_bytes, parse_byte_count(*a.kv_cache_memory));
  }
  kr.memory_utilization = a.gpu_memory_utilization;
  kr.weight_bytes = static_cast<int64_t>(e.model->model->resident_weight_bytes());
  kr.activation_reserve_bytes = activation_reserve(mc, sc);
  if (e.draft_model) {
    kr.weight_bytes += static_cast<int64_t>(e.draft_model->model->resident_weight_bytes());
    kr.activation_reserve_bytes += activation_reserve(e.draft_model->config, sc);
  }
  if (spec) kr.extra_bytes_per_block = proposer_kv_bytes_per_block(*e.model->model, po);
  kr.layout = e.model->model->kv_cache_layout(sc.block_size);
  sc.kv_groups = kr.layout.groups;
  kr.max_model_len = sc.max_model_len;
  kr.max_num_batched_tokens = sc.max_num_batched_tokens;
  kr.max_num_seqs = sc.max_num_seqs;
  // A KV transfer holds each request's state in a checkpoint slot too.
  kr.state_checkpoints = sc.enable_prefix_caching || kv.has_value();
  if (spec) kr.state_snapshots_per_seq = spec->k();
  KASSIGN(MemoryInfo mem, read_memory_info());
  // The ranks share this host's memory; each plans with its part (its weights and its KV heads
  // are its share too). --kv-cache-memory stays per rank, as per GPU in vLLM.
  mem.total_bytes /= tp * dp;
  mem.available_bytes /= tp * dp;
  KASSIGN(e.kv, plan_kv_cache(kr, mem));
  sc.num_blocks = static_cast<int32_t>(e.kv.num_blocks);
  if (kr.layout.state.num_layers > 0) {
    KLOG_INFO(
        "Linear-attention state: {} slots, {} prefix-cache checkpoints and {} draft snapshots of "
        "{:.2f} MiB ({} layers), {:.2f} GiB{}",
        e.kv.num_state_slots, e.kv.num_state_checkpoints, e.kv.num_state_snapshots,
        double(kr.layout.state.bytes_per_slot()) / double(1 << 20), kr.layout.state.num_layers,
        double(e.kv.state_bytes) / double(int64_t{1} << 30), tp > 1 ? " per rank" : "");
    sc.num_state_checkpoints = int32_t(e.kv.num_state_checkpoints);
    if (e.kv.num_state_slots < sc.max_num_seqs) {
      KLOG_WARN(
          "the linear-attention state of {} sequences (with their prefix-cache checkpoints and "
          "draft snapshots) "
          "would take over half the KV cache memory: "
          "at most {} run at once (raise --kv-cache-memory or lower --max-num-seqs)",
          sc.max_num_seqs, e.kv.num_state_slots);
      sc.max_num_seqs = e.kv.num_state_slots;
    }
  }
  KTRY(validate(sc));
  KLOG_INFO("KV cache: {} blocks of {} tokens, {:.2f} GiB{} ({})", e.kv.num_blocks - 1,
            sc.block_size, double(e.kv.bytes) / double(int64_t{1} << 30), tp > 1 ? " per rank" : "",
            e.kv.source);
  KLOG_INFO("KV cache size: {} tokens", e.kv.num_tokens);
  KLOG_INFO("Maximum concurrency for {} tokens per request: {:.2f}x", sc.max_model_len,
            double(e.kv.num_tokens) / double(sc.max_model_len));
  KLOG_INFO("Chunked prefill is {} with max_num_batched_tokens={}, max_num_seqs={}",
            sc.enable_chunked_prefill ? "enabled" : "disabled", sc.max_num_batched_tokens,
            sc.max_num_seqs);

  EngineClient::Options& opts = prepared.options;
  opts.scheduler = sc;
  opts.first_engine_index = a.data_parallel_first;
  for (int64_t id : e.model->generation.eos_token_ids) opts.eos_token_ids.push_back(int32_t(id));
  if (spec) {
    opts.num_speculative_tokens = spec->k();
    KLOG_INFO(
        "Speculative decoding: method={}, num_speculative_tokens={}, drafting while at most {} "
        "requests sample in a step",
        spec->method_alias, spec->k(),
        spec->disable_by_batch_size.value_or(default_max_drafting_requests(spec->k())));
  }
  for (int d = 0; d < dp; ++d) {
    LoadedModel& model = d == 0 ? *e.model : *e.more_ranks[size_t(d - 1)].model;
    const LoadedModel* draft =
        d == 0 ? e.draft_model.get() : e.more_ranks[size_t(d - 1)].draft.get();
    KASSIGN(Speculation speculation, make_speculation(spec, proposer_options(spec, sc, draft),
                                                      *model.model, e.kv.num_blocks));
    if (tp == 1 && dp == 1 && !always_executors) {
      opts.speculation = std::move(speculation);
      break;
    }
    const int dp_rank = a.data_parallel_first + d;
    // The rank's connector, and its TP rank 0's KV worker (which answers the connector's
    // lease messages).
    auto attach_kv = [&](ModelRunner& runner) -> Status {
      if (!kv) return Status::Ok();
      auto connector = make_kv_connector(*kv, dp_rank, kr.layout.state.num_layers > 0);
      KASSIGN(auto worker, start_kv_worker(*kv, *model.model, model.config, runner.kv_memory(),
                                           dp_rank, 0, connector->control()));
      runner.set_kv_worker(std::move(worker));
      opts.kv_connectors.push_back(std::move(connector));
      return Status::Ok();
    };
    if (tp == 1) {
      auto executor = std::make_unique<InProcessExecutor>(
          *model.model, sc.num_blocks, sc.block_size, std::move(speculation),
          int32_t(sc.max_num_seqs), sc.num_state_checkpoints);
      KTRY(attach_kv(executor->runner()));
      opts.executors.push_back(std::move(executor));
      continue;
    }
    KASSIGN(auto leader, HostCommLeader::bind(names[size_t(d)].endpoint, tp - 1));
    WorkerProcesses& procs = *workers[size_t(d)];
    KTRY(leader->wait_for_workers(kWorkerStartTimeout, [&procs] { return procs.check(); }));
    auto runner = std::make_unique<ModelRunner>(
        *model.model,
        model.model->make_kv_cache(sc.num_blocks, sc.block_size, int32_t(sc.max_num_seqs),
                                   sc.num_state_checkpoints),
        std::move(speculation));
    KTRY(attach_kv(*runner));
    KASSIGN(auto executor,
            MultiprocExecutor::start(std::move(workers[size_t(d)]), std::move(leader),
                                     std::move(runner), kv_plan(sc), kWorkerStartTimeout));
    opts.executors.push_back(std::move(executor));
  }
  return prepared;
}

// rank `d`'s control channel at the head: --data-parallel-address, port --data-parallel-rpc-port
// + d (an explicit address, never a resolved hostname).
std::string remote_rank_endpoint(const EngineArgs& a, int d) {
  return fmt::format("tcp://{}:{}", a.data_parallel_address, a.data_parallel_rpc_port + d);
}

}  // namespace

Expected<Engine> start_engine(const EngineArgs& a) {
  const int local = a.local_data_parallel_ranks();
  const int remote = a.data_parallel_remote;
  KASSIGN(Prepared p, prepare_local_ranks(a, /*always_executors=*/remote > 0, /*headless=*/false));
  Engine& e = p.engine;
  // Data-parallel ranks on other nodes (--headless there): each connects to its own port here.
  for (int d = a.data_parallel_first + local; d < a.data_parallel_first + local + remote; ++d) {
    const std::string endpoint = remote_rank_endpoint(a, d);
    KASSIGN(auto leader, HostCommLeader::bind(endpoint, 1));
    KLOG_INFO("waiting for data-parallel rank {} (a --headless node) at {}", d, endpoint);
    if (Status st = leader->wait_for_workers(kWorkerStartTimeout, {}); !st.ok())
      return make_error("data-parallel rank {} did not connect to {}: {}", d, endpoint,
                        st.message());
    auto executor = MultiprocExecutor::start(nullptr, std::move(leader), nullptr,
                                             kv_plan(p.options.scheduler), kWorkerStartTimeout);
    if (!executor.ok())
      return make_error("data-parallel rank {} at {}: {}", d, endpoint, executor.error().message);
    KLOG_INFO("data-parallel rank {} joined from {}", d, endpoint);
    p.options.executors.push_back(std::move(*executor));
  }
  if (e.dp_group) {
    // Every scheduler this process runs joins the lockstep (each blocks until all ranks have).
    const size_t n = p.options.executors.size();
    const std::string settings = lockstep_settings(a, e.model->config);
    std::vector<Expected<std::unique_ptr<DpLockstep>>> joined;
    for (size_t i = 0; i < n; ++i) joined.emplace_back(make_error("not joined"));
    std::vector<std::thread> joining;
    for (size_t i = 0; i < n; ++i)
      joining.emplace_back([&, i] {
        joined[i] = e.dp_group->join_lockstep(a.data_parallel_first + int(i), settings);
      });
    for (std::thread& t : joining) t.join();
    for (auto& j : joined) {
      KTRY(j);
      p.options.lockstep.push_back(std::move(*j));
    }
  }
  e.client =
      std::make_unique<EngineClient>(*e.model->model, e.tokenizer.get(), std::move(p.options));
  return std::move(e);
}

int serve_headless(const EngineArgs& a) {
  auto prepared = prepare_local_ranks(a, /*always_executors=*/true, /*headless=*/true);
  if (!prepared.ok()) {
    KLOG_ERROR("{}", prepared.error().message);
    return 1;
  }
  if (DpGroup* group = prepared->engine.dp_group.get()) {
    // No scheduler here: a group that fails elsewhere must still abort this node's collectives.
    if (Status st = group->watch(fmt::format("node{}", a.data_parallel_first)); !st.ok()) {
      KLOG_ERROR("{}", st.message());
      return 1;
    }
  }
  std::vector<std::unique_ptr<Executor>>& executors = prepared->options.executors;
  const WorkerKvPlan mine = kv_plan(prepared->options.scheduler);
  const bool state = prepared->engine.model->config.linear.enabled();
  std::vector<int> status(executors.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < executors.size(); ++i) {
    threads.emplace_back([&, i] {
      const int d = a.data_parallel_first + int(i);
      const std::string endpoint = remote_rank_endpoint(a, d);
      auto head = HostCommWorker::connect(endpoint, 1);
      if (!head.ok()) {
        KLOG_ERROR("data-parallel rank {}: {}", d, head.error().message);
        status[i] = 1;
        return;
      }
      KLOG_INFO("data-parallel rank {}: serving the head at {}", d, endpoint);
      status[i] =
          run_worker(**head, [&](const WorkerKvPlan& plan) -> Expected<std::unique_ptr<Executor>> {
            if (plan.num_blocks > mine.num_blocks)
              return make_error(
                  "data-parallel rank {} has room for {} KV blocks, the head planned {} (give "
                  "every node the same --kv-cache-memory)",
                  d, mine.num_blocks, plan.num_blocks);
            // The head's scheduler numbers this rank's state slots and checkpoints.
            if (state && (plan.num_state_slots != mine.num_state_slots ||
                          plan.num_state_checkpoints != mine.num_state_checkpoints))
              return make_error(
                  "data-parallel rank {} keeps {} linear-attention state slots and {} "
                  "checkpoints, the head planned {} and {} (give every node the same "
                  "--kv-cache-memory and --max-num-seqs)",
                  d, mine.num_state_slots, mine.num_state_checkpoints, plan.num_state_slots,
                  plan.num_state_checkpoints);
            return std::move(executors[i]);
          });
      KLOG_INFO("data-parallel rank {}: {}", d,
                status[i] == 0 ? "the head stopped it" : "lost the head; stopping");
    });
  }
  for (std::thread& t : threads) t.join();
  for (int s : status)
    if (s != 0) return 1;
  return 0;
}

}  // namespace kestrel::cli
