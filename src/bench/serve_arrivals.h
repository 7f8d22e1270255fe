// bench/serve_arrivals.h — when `bench serve` sends each request, as vLLM's get_request schedules
// them: gamma-distributed gaps (Poisson arrivals at burstiness 1), or all at once.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace kestrel::bench {

// OK when request_rate is > 0 (inf allowed) and burstiness is > 0 (inf allowed); the error names
// the flag at fault.
Status check_arrival_params(double request_rate, double burstiness);

// Seconds from the start at which each of n requests is sent, non-decreasing. All 0 when
// request_rate is inf. Otherwise the gap before each request is gamma(shape = burstiness,
// scale = 1 / (request_rate * burstiness)) — mean 1/rate, coefficient of variation
// 1/sqrt(burstiness) — or exactly 1/rate when burstiness is inf; the cumulative times are then
// scaled so the last is n / request_rate, as vLLM does to steady throughput across seeds.
// Deterministic per seed. Preconditions (KCHECKed): n >= 0 and check_arrival_params passes.
std::vector<double> arrival_times(int64_t n, double request_rate, double burstiness, uint64_t seed);

}  // namespace kestrel::bench
