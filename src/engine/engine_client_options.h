// engine/engine_client_options.h — what an EngineClient is made of: one executor per
// data-parallel rank with its scheduler settings, and what the ranks share. The engine builder
// (engine/engine_builder.h) fills it; so do tests that assemble ranks of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dp_lockstep.h"
#include "engine/executor.h"
#include "engine/kv_connector.h"
#include "sched/scheduler.h"

namespace kestrel {

struct EngineClientOptions {
  // Every rank's scheduler: the KV groups and sizes of its executor's storage; must pass
  // validate().
  SchedulerConfig scheduler;
  int64_t vocab_size = 0;  // prompt and stop token ids must be below it
  std::vector<int32_t> eos_token_ids;
  // One per data-parallel rank (at least one), each with its own scheduler and KV cache of
  // scheduler.num_blocks: an in-process runner (engine/in_process_executor.h), or a
  // tensor-parallel group or remote rank (engine/multiproc_executor.h).
  std::vector<std::unique_ptr<Executor>> executors;
  // Expert parallelism across the data-parallel ranks: each executor's rank in the group's
  // lockstep (engine/dp_lockstep.h), in the same order; empty when the ranks step on their own.
  std::vector<std::unique_ptr<DpLockstep>> lockstep;
  // Prefill/decode disaggregation: each executor's rank's connector, in the same order (empty:
  // none; kv_transfer_params are then ignored, as vLLM ignores them without a connector).
  std::vector<std::unique_ptr<KvConnector>> kv_connectors;
  int64_t num_speculative_tokens = 0;  // k, for stats
  // The data-parallel rank of the first engine (a server behind an external load balancer
  // runs one rank of several): engines are numbered from it in logs and metrics.
  int first_engine_index = 0;
  // How often the engine threads log vLLM's "SpecDecoding metrics" line (0: never).
  std::chrono::milliseconds spec_log_interval{10000};
};

}  // namespace kestrel
