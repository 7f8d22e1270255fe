#include "engine/local_engine.h"

#include <utility>

namespace kestrel {

std::unique_ptr<EngineCore> build_local_core(CausalLM& model, SchedulerConfig config,
                                             std::vector<int32_t> eos_token_ids,
                                             Speculation speculation) {
  config = with_model_kv_groups(std::move(config), model);
  return std::make_unique<EngineCore>(
      make_in_process_executor(model, config, std::move(speculation)), config,
      std::move(eos_token_ids));
}

std::unique_ptr<EngineClient> build_local_engine(CausalLM& model, const Tokenizer* tokenizer,
                                                 EngineClientOptions options,
                                                 Speculation speculation) {
  options.scheduler = with_model_kv_groups(std::move(options.scheduler), model);
  if (options.vocab_size == 0) options.vocab_size = model.config().vocab_size;
  options.executors.push_back(
      make_in_process_executor(model, options.scheduler, std::move(speculation)));
  return std::make_unique<EngineClient>(tokenizer, std::move(options));
}

}  // namespace kestrel
