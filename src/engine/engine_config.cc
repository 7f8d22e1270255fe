#include "engine/engine_config.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "model/config.h"

namespace kestrel {

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

}  // namespace

std::string random_engine_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

Expected<SchedulerConfig> scheduler_config(const EngineConfig& a, const ModelConfig& m) {
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

Status check_executor_backend(const EngineConfig& a) {
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

}  // namespace kestrel
