// sched/contract_codec.h — msgpack encodings of the scheduler → worker contract
// (SchedulerOutput) and the worker's answer (RunnerOutput), for workers in other processes.
// decode(encode(x)) == x exactly; malformed bytes are an error, never a crash.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "sched/runner_output.h"
#include "sched/scheduler_output.h"

namespace kestrel {

std::string encode(const SchedulerOutput& output);
std::string encode(const RunnerOutput& output);
Expected<SchedulerOutput> decode_scheduler_output(std::string_view bytes);
Expected<RunnerOutput> decode_runner_output(std::string_view bytes);

}  // namespace kestrel
