// cli/engine_args.h — the engine flags every model-running command shares (generate, bench
// latency/throughput, serve), spelled as vLLM spells them, filling an EngineConfig
// (engine/engine_config.h) that engine/engine_builder.h turns into a running engine.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine_config.h"

namespace kestrel::cli {

// Registers the flags on `app`. `model_required`: a --model/-m option must be given (commands
// that take the model positionally, like serve, register their own).
void add_engine_args(CLI::App& app, EngineConfig& args, bool model_required = true);

}  // namespace kestrel::cli
