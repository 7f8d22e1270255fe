#include "engine/engine_builder.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "distributed/host_comm.h"
#include "engine/dp_group.h"
#include "engine/engine_client_options.h"
#include "engine/in_process_executor.h"
#include "engine/kv_budget.h"
#include "engine/kv_ranks.h"
#include "engine/multiproc_executor.h"
#include "engine/rank_setup.h"
#include "engine/worker_processes.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// Destroyed in reverse: the client (and its threads) first, then the models its executors ran,
// then the groups' communicators.
struct Engine::Parts {
  // Expert parallelism across the data-parallel ranks: the group (rank 0's process serves its
  // store), and each local rank's communicator with the ranks of its TP index.
  std::unique_ptr<DpGroup> dp_group;
  std::vector<std::unique_ptr<DeviceComm>> ep_comms;
  // Tensor parallelism: each data-parallel rank's group collectives, which its model (and its
  // workers) use.
  std::vector<std::unique_ptr<DeviceComm>> tp_comms;
  std::vector<RankModels> more_ranks;    // data-parallel ranks after the first: their own copies
  std::unique_ptr<LoadedModel> model;    // the first data-parallel rank's
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model has none Kestrel can read
  KVBudget kv;
  std::unique_ptr<LoadedModel> draft_model;  // speculative_config method=draft_model
  std::unique_ptr<EngineClient> client;
};

Engine::Engine(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
Engine::~Engine() = default;
EngineClient& Engine::client() {
  return *parts_->client;
}
const Tokenizer* Engine::tokenizer() const {
  return parts_->tokenizer.get();
}
const LoadedModel& Engine::model() const {
  return *parts_->model;
}

namespace {

// The bytes one token's KV takes, summed over the cache groups and itemised by group, as the
// pool prices them (a sliding-window group holds at most its window's tokens of a sequence; a
// linear-attention state is per sequence, not per token).
std::string kv_bytes_per_token(const KVCacheLayout& layout) {
  int64_t total = 0;
  std::string parts;
  for (const KVCacheSpec& g : layout.groups) {
    const int64_t bytes = g.bytes_per_block() / g.block_size;
    total += bytes;
    const char* kind = g.kind == KVCacheKind::kMlaLatent       ? "latent"
                       : g.kind == KVCacheKind::kSlidingWindow ? "sliding-window"
                                                               : "full-attention";
    parts += fmt::format("{}{} {} layer{}: {}", parts.empty() ? "" : ", ", g.num_layers, kind,
                         g.num_layers == 1 ? "" : "s", bytes);
  }
  return fmt::format("{} B ({})", total, parts);
}

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
              m.mla.q_lora_rank + m.latent_cache_width();
  // The indexer's queries, head weights and key, and each token's selected keys.
  if (m.indexer.enabled())
    values += m.indexer.num_heads * (m.indexer.head_dim + 1) + m.indexer.head_dim + m.indexer.top_k;
  return s.max_num_batched_tokens * 4 * values + s.max_num_seqs * m.vocab_size * 4;
}

// Expert parallelism across the data-parallel ranks (a MoE model, --enable-expert-parallel and
// more than one data-parallel rank): the group this process takes part in; none otherwise
// (dense models ignore the flag, as vLLM's do).
Expected<std::unique_ptr<DpGroup>> plan_expert_group(const EngineConfig& a, bool headless) {
  if (!a.enable_expert_parallel || a.data_parallel_size < 2) return std::unique_ptr<DpGroup>();
  KASSIGN(const ModelConfig mc, read_model_config(a.model, a.load_format));
  if (mc.moe.num_experts == 0) return std::unique_ptr<DpGroup>();
  DpGroupSpec spec;
  spec.size = a.data_parallel_size;
  spec.serves = a.data_parallel_first == 0 && !headless;
  spec.all_local = spec.serves && a.local_data_parallel_ranks() == a.data_parallel_size;
  spec.address = a.data_parallel_address;
  spec.rpc_port = a.data_parallel_rpc_port;
  spec.start_timeout = a.ready_timeout;
  spec.collective_timeout = kCollectiveTimeout;
  spec.address_hints = AddressHints{a.host_ip, a.socket_ifnames};
  return DpGroup::plan(spec);
}

// What every data-parallel rank of an expert group must share: what shapes the collectives.
std::string lockstep_settings(const EngineConfig& a, const ModelConfig& mc) {
  return fmt::format("{} layers={} hidden={} experts={} tp={} dp={} dtype={}", mc.architecture,
                     mc.num_hidden_layers, mc.hidden_size, mc.moe.num_experts,
                     a.tensor_parallel_size, a.data_parallel_size, a.dtype);
}

// The local data-parallel ranks, loaded and ready: the engine's parts (without the client yet)
// and the client's options, with an executor per local rank.
struct Prepared {
  std::unique_ptr<Engine::Parts> parts = std::make_unique<Engine::Parts>();
  EngineClientOptions options;
};

Expected<Prepared> prepare_local_ranks(const EngineConfig& a, bool headless) {
  set_log_level(a.log_level);
  KTRY(check_executor_backend(a));
  const int tp = a.tensor_parallel_size;
  const int dp = a.local_data_parallel_ranks();
  Prepared prepared;
  Engine::Parts& e = *prepared.parts;
  KASSIGN(e.dp_group, plan_expert_group(a, headless));
  const DpGroup* experts = e.dp_group.get();
  const std::optional<KvInstance> kv = kv_instance(a);
  // Parsed once, before anything is loaded or forked; each rank resolves it against its model.
  KASSIGN(const std::optional<SpeculativeConfig> parsed_spec,
          parse_speculative_config(a.speculative_config));
  // Every data-parallel rank's workers first, before this process starts any thread: the
  // children are forks of it.
  std::vector<std::unique_ptr<WorkerProcesses>> workers(static_cast<size_t>(dp));
  std::vector<GroupNames> names(static_cast<size_t>(dp));
  if (tp > 1) {
    for (int d = 0; d < dp; ++d) {
      names[size_t(d)] = group_names(a.data_parallel_first + d);
      KASSIGN(workers[size_t(d)], WorkerProcesses::spawn(
                                      tp - 1,
                                      [&a, &parsed_spec, &names, experts, d](int rank) {
                                        return run_tp_worker(a, parsed_spec, names[size_t(d)],
                                                             experts, a.data_parallel_first + d,
                                                             rank);
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
    spec = parsed_spec;
    KASSIGN(RankModels m,
            load_rank_models(load_options(a, 0, comm, a.data_parallel_first + d, ep), spec));
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
  KLOG_INFO("KV bytes per token: {}{}", kv_bytes_per_token(kr.layout), tp > 1 ? " per rank" : "");
  KLOG_INFO("Maximum concurrency for {} tokens per request: {:.2f}x", sc.max_model_len,
            double(e.kv.num_tokens) / double(sc.max_model_len));
  KLOG_INFO("Chunked prefill is {} with max_num_batched_tokens={}, max_num_seqs={}",
            sc.enable_chunked_prefill ? "enabled" : "disabled", sc.max_num_batched_tokens,
            sc.max_num_seqs);

  EngineClientOptions& opts = prepared.options;
  opts.scheduler = sc;
  opts.vocab_size = mc.vocab_size;
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
    KTRY(leader->wait_for_workers(a.ready_timeout, [&procs] { return procs.check(); }));
    auto runner = std::make_unique<ModelRunner>(
        *model.model,
        model.model->make_kv_cache(sc.num_blocks, sc.block_size, int32_t(sc.max_num_seqs),
                                   sc.num_state_checkpoints),
        std::move(speculation));
    KTRY(attach_kv(*runner));
    KASSIGN(auto executor, MultiprocExecutor::start(
                               std::move(workers[size_t(d)]), std::move(leader), std::move(runner),
                               kv_plan(sc), a.ready_timeout, a.execute_timeout));
    opts.executors.push_back(std::move(executor));
  }
  return prepared;
}

// rank `d`'s control channel at the head: --data-parallel-address, port --data-parallel-rpc-port
// + d (an explicit address, never a resolved hostname).
std::string remote_rank_endpoint(const EngineConfig& a, int d) {
  return fmt::format("tcp://{}:{}", a.data_parallel_address, a.data_parallel_rpc_port + d);
}

}  // namespace

Expected<std::unique_ptr<Engine>> build_engine(const EngineConfig& a) {
  const int local = a.local_data_parallel_ranks();
  const int remote = a.data_parallel_remote;
  KASSIGN(Prepared p, prepare_local_ranks(a, /*headless=*/false));
  Engine::Parts& e = *p.parts;
  // Data-parallel ranks on other nodes (--headless there): each connects to its own port here.
  for (int d = a.data_parallel_first + local; d < a.data_parallel_first + local + remote; ++d) {
    const std::string endpoint = remote_rank_endpoint(a, d);
    KASSIGN(auto leader, HostCommLeader::bind(endpoint, 1));
    KLOG_INFO("waiting for data-parallel rank {} (a --headless node) at {}", d, endpoint);
    if (Status st = leader->wait_for_workers(a.ready_timeout, {}); !st.ok())
      return make_error("data-parallel rank {} did not connect to {}: {}", d, endpoint,
                        st.message());
    auto executor =
        MultiprocExecutor::start(nullptr, std::move(leader), nullptr, kv_plan(p.options.scheduler),
                                 a.ready_timeout, a.execute_timeout);
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
  e.client = std::make_unique<EngineClient>(e.tokenizer.get(), std::move(p.options));
  return std::make_unique<Engine>(std::move(p.parts));
}

int run_headless(const EngineConfig& a) {
  auto prepared = prepare_local_ranks(a, /*headless=*/true);
  if (!prepared.ok()) {
    KLOG_ERROR("{}", prepared.error().message);
    return 1;
  }
  if (DpGroup* group = prepared->parts->dp_group.get()) {
    // No scheduler here: a group that fails elsewhere must still abort this node's collectives.
    if (Status st = group->watch(fmt::format("node{}", a.data_parallel_first)); !st.ok()) {
      KLOG_ERROR("{}", st.message());
      return 1;
    }
  }
  std::vector<std::unique_ptr<Executor>>& executors = prepared->options.executors;
  const WorkerKvPlan mine = kv_plan(prepared->options.scheduler);
  const bool state = prepared->parts->model->config.linear.enabled();
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

}  // namespace kestrel
