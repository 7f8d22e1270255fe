// engine/engine_config.h — everything an engine is built from (engine/engine_builder.h), as
// vLLM's engine flags spell it: the model and how to load it, scheduling, the KV cache budget,
// speculative decoding, and the parallel layout (tensor, data and expert parallelism, this
// process's share of the data-parallel ranks, prefill/decode disaggregation). The CLI fills it
// from the command line; tests fill it by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "kvx/kv_transfer_config.h"
#include "sched/scheduler.h"

namespace kestrel {

// What every rank of this instance shares (set before the worker processes fork).
struct KvInstance {
  KvTransferConfig transfer;
  std::string host;    // the address the instance's KV servers advertise
  uint64_t epoch = 0;  // this start's incarnation: a restarted instance is a new peer
  int dp_size = 1, tp_size = 1;
  int block_size = 16;
};

struct EngineConfig {
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
  std::string log_level = "info";  // the builder sets the process's (and its workers')
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
  // This host's address toward rank 0, named outright (the CLI reads VLLM_HOST_IP and
  // GLOO_SOCKET_IFNAME); empty: the route's source address.
  std::string host_ip, socket_ifnames;
  // How long the ranks' workers may take to load and build their runners, and how long one step
  // may wait for its workers (the CLI reads VLLM_ENGINE_READY_TIMEOUT_S and
  // VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS; vLLM's defaults). A dead worker fails a wait at once.
  std::chrono::seconds ready_timeout{600};
  std::chrono::seconds execute_timeout{300};
  int local_data_parallel_ranks() const {
    return data_parallel_count > 0 ? data_parallel_count : data_parallel_size;
  }
  std::string distributed_executor_backend;  // empty: not given (mp when TP > 1)
  // Prefill/decode disaggregation, from --kv-transfer-config (serve sets it): what every rank
  // shares; the builder fills in the sizes from the fields above.
  std::optional<KvInstance> kv;
  // A PD decode instance gives back requests it has no blocks for (serve sets it from
  // --additional-config recompute_scheduler_enable on a kv_consumer).
  bool give_back_preempted = false;
};

// A random engine id, for a KV transfer config without one.
std::string random_engine_id();

// Refuses the executor backends Kestrel does not run (ray, external_launcher) and uni with
// more than one rank.
Status check_executor_backend(const EngineConfig& config);

struct ModelConfig;

// The scheduler settings `config` implies for `model` (max_model_len from the model when not
// given, the token budget vLLM would pick), before KV sizing.
Expected<SchedulerConfig> scheduler_config(const EngineConfig& config, const ModelConfig& model);

}  // namespace kestrel
