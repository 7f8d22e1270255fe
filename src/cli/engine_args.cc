#include "cli/engine_args.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kestrel::cli {

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

Status apply_cpu_environment() {
  const std::string isa = env_or_empty("KESTREL_CPU_ISA");
  if (!isa.empty())
    if (Status st = cap_cpu_isa(isa); !st.ok())
      return make_error("KESTREL_CPU_ISA: {}", st.message());
  enable_cpu_amx(env_or_empty("KESTREL_CPU_AMX") != "0");
  enable_cpu_amx_bf16(env_or_empty("KESTREL_CPU_AMX_BF16") == "1");
  return Status::Ok();
}

namespace {

// A whole number of seconds from the environment variable `name`, if set.
Status read_seconds(const char* name, std::chrono::seconds& out) {
  const std::string text = env_or_empty(name);
  if (text.empty()) return Status::Ok();
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 1)
    return make_error("{}={}: a whole number of seconds, at least 1", name, text);
  out = std::chrono::seconds(v);
  return Status::Ok();
}

}  // namespace

Status read_engine_environment(EngineConfig& a) {
  // Where this host's address is named outright, as vLLM and PyTorch read it.
  a.host_ip = env_or_empty("VLLM_HOST_IP");
  a.socket_ifnames = env_or_empty("GLOO_SOCKET_IFNAME");
  KTRY(read_seconds("VLLM_ENGINE_READY_TIMEOUT_S", a.ready_timeout));
  KTRY(read_seconds("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", a.execute_timeout));
  return Status::Ok();
}

void add_engine_args(CLI::App& app, EngineConfig& a, bool model_required) {
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

}  // namespace kestrel::cli
