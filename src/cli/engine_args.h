// cli/engine_args.h — the engine flags every model-running command shares (generate, bench
// latency/throughput, serve), spelled as vLLM spells them, filling an EngineConfig
// (engine/engine_config.h) that engine/engine_builder.h turns into a running engine.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine_config.h"

namespace kestrel::cli {

// The CPU kernel choices the environment makes for the whole process (KESTREL_CPU_ISA caps the
// SIMD kernels at an ISA, KESTREL_CPU_AMX=0 keeps batches off AMX); an error names a bad value.
// Environment variables are read only by the CLI.
Status apply_cpu_environment();

// The engine settings the environment makes, as vLLM reads them: VLLM_HOST_IP and
// GLOO_SOCKET_IFNAME (this host's address toward rank 0), VLLM_ENGINE_READY_TIMEOUT_S (how long
// the workers may take to load) and VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (how long one step may
// wait for them). An error names a bad value.
Status read_engine_environment(EngineConfig& config);

// Registers the flags on `app`. `model_required`: a --model/-m option must be given (commands
// that take the model positionally, like serve, register their own).
void add_engine_args(CLI::App& app, EngineConfig& args, bool model_required = true);

}  // namespace kestrel::cli
