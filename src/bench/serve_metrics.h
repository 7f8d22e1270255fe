// bench/serve_metrics.h — the arithmetic and reporting half of `kestrel bench serve`: turns the
// client's per-request traces into vLLM's serving metrics (TTFT, TPOT, ITL, E2EL, throughputs,
// goodput, peak output rate), its printed result block and its --save-result JSON.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel::bench {

// One request as the client saw it. Times are seconds.
struct RequestTrace {
  bool success = false;
  std::string error;
  int64_t prompt_len = 0;     // input tokens
  int64_t output_tokens = 0;  // from the final usage chunk
  double ttft_s = 0;          // send -> first chunk that carries text (not the chat role chunk)
  std::vector<double> itl_s;  // gaps between successive content chunks
  double latency_s = 0;       // send -> last byte (E2EL)
  double start_s = 0;         // send time relative to the benchmark start
  // Arrival of each content chunk relative to the benchmark start. When empty it is derived as
  // vLLM does: start_s + ttft_s, then each ITL gap added in turn.
  std::vector<double> token_times_s;
};

struct BenchmarkConfig {
  // Metrics that get a printed section and JSON keys: any of ttft, tpot, itl, e2el.
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99};
  // SLOs in milliseconds keyed ttft / tpot / e2el; empty = no goodput reported.
  std::map<std::string, double> goodput_slo_ms;
  std::optional<int> max_concurrency;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  // Only for the JSON header.
  std::string date;  // "%Y%m%d-%H%M%S", supplied by the caller so results are reproducible
  std::string backend;
  std::optional<std::string> label;
  std::string model_id;
  std::string tokenizer_id;
  int64_t num_prompts = 0;
};

// Summary of one metric, in milliseconds.
struct MetricStats {
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;                                      // population (ddof 0), as numpy
  std::vector<std::pair<double, double>> percentiles_ms;  // (percentile, value)
};

struct BenchmarkResult {
  double duration_s = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0;
  double request_goodput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  MetricStats ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0;   // busiest 1-second bucket
  int64_t max_concurrent_requests = 0;  // most requests active in one 1-second bucket
  // Per request, in trace order (failed ones included; their output length is 0).
  std::vector<int64_t> input_lens;
  std::vector<int64_t> output_lens;
  std::vector<double> ttfts_s;
  std::vector<std::vector<double>> itls_s;
  std::vector<std::string> errors;
};

// Metrics over the successful traces; failed ones are only counted. With no successes every
// statistic is 0. duration_s must be positive.
BenchmarkResult calculate_metrics(const std::vector<RequestTrace>& traces, double duration_s,
                                  const BenchmarkConfig& config);

// vLLM's "Serving Benchmark Result" block, byte for byte (column padding included), ending in a
// newline.
std::string format_result_block(const BenchmarkResult& result, const BenchmarkConfig& config);

// vLLM's --save-result object, keys in vLLM's order. include_per_request adds the per-request
// arrays (vLLM's --save-detailed) except the generated texts.
nlohmann::ordered_json result_json(const BenchmarkResult& result, const BenchmarkConfig& config,
                                   bool include_per_request);

// Parses --goodput "KEY:VALUE" pairs (ttft, tpot, e2el in milliseconds, non-negative).
Expected<std::map<std::string, double>> parse_goodput(const std::vector<std::string>& pairs);

// How vLLM names a percentile in keys and labels: "99" for 99.0, "99.9" for 99.9.
std::string percentile_word(double p);

}  // namespace kestrel::bench
