// cli/engine_args.h — the engine flags every model-running command shares (generate, bench
// latency/throughput, serve), spelled as vLLM spells them, and the start-up that turns them into
// a loaded model, its tokenizer and a running EngineClient.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/dp_group.h"
#include "engine/engine_client.h"
#include "engine/kv_budget.h"
#include "engine/kv_ranks.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

struct EngineArgs {
  std::string model;
  std::string tokenizer;  // empty: the model's own
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";
  bool calculate_kv_scales = false;
  std::string quant_compute = "int8";
  std::string quantization;  // --quantization; empty: read from the checkpoint
  int threads = 0;
  bool pin_threads = false;
  uint64_t seed = 0;
  std::optional<int64_t> max_model_len;
  int64_t max_num_seqs = 256;
  std::optional<int64_t> max_num_batched_tokens;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  std::optional<std::string> kv_cache_memory;
  std::optional<double> gpu_memory_utilization;
  std::string log_level = "info";
  // --speculative-config JSON as given (empty: absent); spec_decode/speculative_config.h parses it.
  std::string speculative_config;
  // Ranks of a tensor-parallel group on this host, one process each (the mp backend).
  int tensor_parallel_size = 1;
  // MoE layers hold whole experts per tensor-parallel rank (instead of every expert's features).
  bool enable_expert_parallel = false;
  // Data-parallel ranks: engines with their own scheduler, KV cache and model copy (each a
  // tensor-parallel group), requests balanced among them by load.
  int data_parallel_size = 1;
  // This process runs ranks [first, first + count) of them, and ranks [first + count, first +
  // count + remote) join it from other nodes; serve sets these (not flags) for a server that is
  // one rank behind an external load balancer (--data-parallel-rank), a head whose other ranks
  // run --headless elsewhere (--data-parallel-size-local), and a --headless node.
  int data_parallel_first = 0, data_parallel_count = 0;  // count 0: all of them
  int data_parallel_remote = 0;
  // Rank 0's node, where the ranks on other nodes connect (rank d at rpc_port + d).
  std::string data_parallel_address = "127.0.0.1";
  int data_parallel_rpc_port = 29550;
  int local_data_parallel_ranks() const {
    return data_parallel_count > 0 ? data_parallel_count : data_parallel_size;
  }
  std::string distributed_executor_backend;  // empty: not given (mp when TP > 1)
  // Prefill/decode disaggregation, from --kv-transfer-config (serve sets it): what every rank
  // shares; start_engine fills in the sizes from the flags above.
  std::optional<KvInstance> kv;
  // A PD decode instance gives back requests it has no blocks for (serve sets it from
  // --additional-config recompute_scheduler_enable on a kv_consumer).
  bool give_back_preempted = false;
};

// Refuses the executor backends Kestrel does not run (ray, external_launcher) and uni with
// more than one rank.
Status check_executor_backend(const EngineArgs& args);

// Registers the flags on `app`. `model_required`: a --model/-m option must be given (commands
// that take the model positionally, like serve, register their own).
void add_engine_args(CLI::App& app, EngineArgs& args, bool model_required = true);

// One engine rank's models: its shard of the target and, for draft_model speculation, the whole
// draft model on the same backend.
struct RankModels {
  std::unique_ptr<LoadedModel> model, draft;
};

struct Engine {
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
  std::unique_ptr<LoadedModel> draft_model;  // --speculative-config method=draft_model
  std::unique_ptr<EngineClient> client;      // declared last: stopped first
};

// The scheduler settings the flags imply for this model (max_model_len from the model when not
// given, the token budget vLLM would pick), before KV sizing.
Expected<SchedulerConfig> scheduler_config(const EngineArgs& args, const ModelConfig& model);

// Loads the model and tokenizer, sizes the KV pool (logged as blocks and tokens) and starts the
// engine threads. With --tensor-parallel-size N it first forks N - 1 worker processes per
// data-parallel rank, which load their shards beside the rank's TP rank 0 (in this process) and
// run each step with it (engine/multiproc_executor.h): call it before the process starts
// threads.
Expected<Engine> start_engine(const EngineArgs& args);

// --headless: runs this node's data-parallel ranks for the head at --data-parallel-address (rank
// d connects to its rpc_port + d), each step the head sends, until the head stops them (0) or
// is lost (1). Call it, too, before the process starts threads.
int serve_headless(const EngineArgs& args);

}  // namespace kestrel::cli
