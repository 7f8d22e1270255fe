#include "engine/in_process_executor.h"

#include <exception>

namespace kestrel {

Expected<RunnerOutput> InProcessExecutor::execute(const SchedulerOutput& output) {
  try {
    return runner_.execute(output);
  } catch (const std::exception& e) {
    return make_error("{}", e.what());
  }
}

SchedulerConfig with_model_kv_groups(SchedulerConfig c, const CausalLM& model) {
  const KVCacheLayout layout = model.kv_cache_layout(c.block_size);
  c.kv_groups = layout.groups;
  c.has_recurrent_state = layout.state.num_layers > 0;
  return c;
}

std::unique_ptr<InProcessExecutor> make_in_process_executor(CausalLM& model,
                                                            const SchedulerConfig& c,
                                                            Speculation speculation) {
  return std::make_unique<InProcessExecutor>(model, c.num_blocks, c.block_size,
                                             std::move(speculation), int32_t(c.max_num_seqs),
                                             c.num_state_checkpoints);
}

}  // namespace kestrel
