// The cost of one ThreadPool::parallel_for that dispatches to the workers (issue 18's count of
// synchronisations per decode step): an almost empty job of eight chunks, back to back, as the
// GEMMs of a decode step follow each other while the workers still spin.
//
// Run:   ./build-bench/bench/kernels/pool_bench
// Cases: pool/parallel_for/threads:<n>. Time is wall time per call.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>

#include "base/thread_pool.h"

namespace {

void bm_parallel_for(benchmark::State& state) {
  kestrel::ThreadPool pool(int(state.range(0)));
  std::atomic<int64_t> items{0};
  for (auto _ : state)
    pool.parallel_for(
        8, 1, [&](int64_t b, int64_t e) { items.fetch_add(e - b, std::memory_order_relaxed); });
  state.SetItemsProcessed(items.load());
}
BENCHMARK(bm_parallel_for)
    ->Name("pool/parallel_for")
    ->ArgName("threads")
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
