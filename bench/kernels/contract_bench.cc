// The msgpack scheduler → worker contract (sched/contract_codec.h): encoding and decoding one
// step's SchedulerOutput and RunnerOutput, as a worker process pays per step. Decode steps of
// N running requests (one token each, a block every 16 steps), and a prefill step admitting
// one request with a 2048-token prompt. Bytes per message are reported as a counter.
#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>

#include "sched/contract_codec.h"

namespace kestrel {
namespace {

SchedulerOutput decode_step(int64_t n) {
  SchedulerOutput out;
  for (int64_t i = 0; i < n; ++i) {
    const RequestHandle id = RequestHandle(i);
    std::vector<BlockId> added;
    if (i % 16 == 0) added.push_back(int32_t(i + 1));
    out.cached_requests.push_back(CachedRequestData{id, false, {added}, 300});
    out.scheduled.push_back(ScheduledTokens{id, 1, {}});
  }
  out.total_num_scheduled_tokens = n;
  return out;
}

SchedulerOutput prefill_step() {
  SchedulerOutput out;
  NewRequestData d;
  d.id = 0;
  for (int32_t i = 0; i < 2048; ++i) d.prompt_token_ids.push_back(i * 37 % 151000);
  std::vector<BlockId> table;
  for (int32_t b = 0; b < 128; ++b) table.push_back(b + 1);
  d.block_ids = {table};
  out.new_requests.push_back(d);
  out.scheduled.push_back(ScheduledTokens{d.id, 2048, {}});
  out.total_num_scheduled_tokens = 2048;
  return out;
}

RunnerOutput samples(int64_t n) {
  RunnerOutput out;
  for (int64_t i = 0; i < n; ++i)
    out.sampled.push_back(RequestSamples{RequestHandle(i), {int32_t(i * 7)}, {}, {}});
  return out;
}

void BM_SchedulerOutput(benchmark::State& state, const SchedulerOutput& step) {
  std::string bytes;
  for (auto _ : state) {
    bytes = encode(step);
    auto back = decode_scheduler_output(bytes);
    benchmark::DoNotOptimize(back);
  }
  state.counters["bytes"] = double(bytes.size());
}

void BM_DecodeStep(benchmark::State& state) {
  BM_SchedulerOutput(state, decode_step(state.range(0)));
}
BENCHMARK(BM_DecodeStep)->Arg(32)->Arg(256);

void BM_PrefillStep(benchmark::State& state) {
  BM_SchedulerOutput(state, prefill_step());
}
BENCHMARK(BM_PrefillStep);

void BM_RunnerOutput(benchmark::State& state) {
  const RunnerOutput out = samples(state.range(0));
  std::string bytes;
  for (auto _ : state) {
    bytes = encode(out);
    auto back = decode_runner_output(bytes);
    benchmark::DoNotOptimize(back);
  }
  state.counters["bytes"] = double(bytes.size());
}
BENCHMARK(BM_RunnerOutput)->Arg(32)->Arg(256);

}  // namespace
}  // namespace kestrel

BENCHMARK_MAIN();
