// cli/engine_args.h — the engine flags every model-running command shares (generate, bench
// latency/throughput, serve), spelled as vLLM spells them, and the start-up that turns them into
// a loaded model, its tokenizer and a running EngineClient.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "engine/engine_client.h"
#include "engine/kv_budget.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

struct EngineArgs {
  std::string model;
  std::string tokenizer;  // empty: the model's own
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";
  std::string quant_compute = "int8";
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
  // --speculative-config JSON as given (empty: absent); spec/speculative_config.h parses it.
  std::string speculative_config;
  // Ranks of a tensor-parallel group on this host, one process each (the mp backend).
  int tensor_parallel_size = 1;
  std::string distributed_executor_backend;  // empty: not given (mp when TP > 1)
};

// Refuses the executor backends Kestrel does not run (ray, external_launcher) and uni with
// more than one rank.
Status check_executor_backend(const EngineArgs& args);

// Registers the flags on `app`. `model_required`: a --model/-m option must be given (commands
// that take the model positionally, like serve, register their own).
void add_engine_args(CLI::App& app, EngineArgs& args, bool model_required = true);

struct Engine {
  // Tensor parallelism: the group's collectives, which the model (and its workers) use.
  std::unique_ptr<DeviceComm> tp_comm;
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model has none Kestrel can read
  KVBudget kv;
  std::unique_ptr<LoadedModel> draft_model;  // --speculative-config method=draft_model
  std::unique_ptr<EngineClient> client;      // declared last: stopped first
};

// The scheduler settings the flags imply for this model (max_model_len from the model when not
// given, the token budget vLLM would pick), before KV sizing.
Expected<SchedulerConfig> scheduler_config(const EngineArgs& args, const ModelConfig& model);

// Loads the model and tokenizer, sizes the KV pool (logged as blocks and tokens) and starts the
// engine threads. With --tensor-parallel-size N it first forks N - 1 worker processes, which
// load their shards beside rank 0 and run each step with it (engine/multiproc_executor.h): call
// it before the process starts threads.
Expected<Engine> start_engine(const EngineArgs& args);

}  // namespace kestrel::cli
