// engine/local_engine.h — engines over a model already loaded in this process (tests and
// tools that hold the model themselves): one rank, its InProcessExecutor running on the engine
// thread, assembled as engine/engine_builder.cc assembles a one-rank engine.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine_client.h"
#include "engine/engine_client_options.h"
#include "engine/engine_core.h"
#include "engine/in_process_executor.h"

namespace kestrel {

// A one-rank engine core over `model`; `config` gets the model's KV cache groups.
std::unique_ptr<EngineCore> build_local_core(CausalLM& model, SchedulerConfig config,
                                             std::vector<int32_t> eos_token_ids,
                                             Speculation speculation = {});

// An engine client over `model`: `options` gains the model's KV cache groups, its vocabulary
// size (unless set) and one in-process executor, after any executors it already has.
std::unique_ptr<EngineClient> build_local_engine(CausalLM& model, const Tokenizer* tokenizer,
                                                 EngineClientOptions options,
                                                 Speculation speculation = {});

}  // namespace kestrel
