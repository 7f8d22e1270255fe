#include "engine/executor.h"

#include <exception>

namespace kestrel {

Expected<RunnerOutput> InProcessExecutor::execute(const SchedulerOutput& output) {
  try {
    return runner_.execute(output);
  } catch (const std::exception& e) {
    return make_error("{}", e.what());
  }
}

}  // namespace kestrel
