// `bench serve` arithmetic against hand-computed numbers: vLLM's metric definitions (TPOT skips
// single-token requests, ITL pooled, population std, numpy percentiles), failed-request handling,
// goodput SLOs, the 1-second peak buckets, the printed block byte for byte and the JSON keys.
#include "bench/serve_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kestrel::bench {
namespace {

constexpr double kTol = 1e-9;  // ms; every expected value below is exact up to rounding

// Three successes and one failure, 2 s benchmark:
//   R0: prompt 10, 5 tokens, sent 0.0, ttft 0.1, gaps 4 x 0.05, latency 0.3
//   R1: prompt 20, 3 tokens, sent 0.5, ttft 0.2, gaps 0.1 0.3,  latency 0.6
//   R2: prompt 30, 1 token,  sent 0.9, ttft 0.4, no gaps,       latency 0.4
//   R3: prompt 40, failed
std::vector<RequestTrace> four_traces() {
  std::vector<RequestTrace> t(4);
  t[0] = {true, "", 10, 5, 0.1, {0.05, 0.05, 0.05, 0.05}, 0.3, 0.0, {}};
  t[1] = {true, "", 20, 3, 0.2, {0.1, 0.3}, 0.6, 0.5, {}};
  t[2] = {true, "", 30, 1, 0.4, {}, 0.4, 0.9, {}};
  t[3] = {false, "boom", 40, 7, 0.0, {}, 0.0, 1.0, {}};
  return t;
}

BenchmarkConfig three_percentiles() {
  BenchmarkConfig c;
  c.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  c.metric_percentiles = {50, 90, 99};
  return c;
}

void expect_percentiles(const MetricStats& s, double p50, double p90, double p99) {
  ASSERT_EQ(s.percentiles_ms.size(), 3u);
  EXPECT_EQ(s.percentiles_ms[0].first, 50);
  EXPECT_NEAR(s.percentiles_ms[0].second, p50, kTol);
  EXPECT_EQ(s.percentiles_ms[1].first, 90);
  EXPECT_NEAR(s.percentiles_ms[1].second, p90, kTol);
  EXPECT_EQ(s.percentiles_ms[2].first, 99);
  EXPECT_NEAR(s.percentiles_ms[2].second, p99, kTol);
}

TEST(ServeMetrics, CountsAndThroughputs) {
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, three_percentiles());
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.total_input, 60);                 // 10 + 20 + 30, the failed prompt not counted
  EXPECT_EQ(r.total_output, 9);                 // 5 + 3 + 1, the failed request's 7 not counted
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.5);  // 3 / 2
  EXPECT_DOUBLE_EQ(r.output_throughput, 4.5);   // 9 / 2
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 34.5);  // 69 / 2
  EXPECT_DOUBLE_EQ(r.duration_s, 2.0);
}

TEST(ServeMetrics, TtftStatistics) {
  // ms: 100, 200, 400. mean 700/3; deviations -400/3, -100/3, 500/3 -> squares sum 420000/9,
  // /3 -> std sqrt(140000)/3. Sorted percentile ranks over 2 gaps: p50 1.0 -> 200,
  // p90 1.8 -> 200 + 0.8*200 = 360, p99 1.98 -> 200 + 0.98*200 = 396.
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, three_percentiles());
  EXPECT_NEAR(r.ttft.mean_ms, 700.0 / 3, kTol);
  EXPECT_NEAR(r.ttft.median_ms, 200, kTol);
  EXPECT_NEAR(r.ttft.std_ms, std::sqrt(140000.0) / 3, kTol);
  expect_percentiles(r.ttft, 200, 360, 396);
}

TEST(ServeMetrics, TpotSkipsSingleTokenRequests) {
  // R0: (0.3 - 0.1) / 4 = 50 ms; R1: (0.6 - 0.2) / 2 = 200 ms; R2 (1 token) left out, else the
  // mean would be 250/3. mean 125, std 75, p90 50 + 0.9*150 = 185, p99 50 + 0.99*150 = 198.5.
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, three_percentiles());
  EXPECT_NEAR(r.tpot.mean_ms, 125, kTol);
  EXPECT_NEAR(r.tpot.median_ms, 125, kTol);
  EXPECT_NEAR(r.tpot.std_ms, 75, kTol);
  expect_percentiles(r.tpot, 125, 185, 198.5);
}

TEST(ServeMetrics, ItlIsPooledAcrossRequests) {
  // Gaps pooled: 50 50 50 50 100 300 ms. mean 600/6 = 100; median (rank 2.5) 50;
  // deviations -50 x4, 0, 200 -> squares 10000 + 40000, /6 -> std sqrt(50000/6);
  // p90 rank 4.5 -> 100 + 0.5*200 = 200; p99 rank 4.95 -> 100 + 0.95*200 = 290.
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, three_percentiles());
  EXPECT_NEAR(r.itl.mean_ms, 100, kTol);
  EXPECT_NEAR(r.itl.median_ms, 50, kTol);
  EXPECT_NEAR(r.itl.std_ms, std::sqrt(50000.0 / 6), kTol);
  expect_percentiles(r.itl, 50, 200, 290);
}

TEST(ServeMetrics, E2elIsLatency) {
  // ms: 300, 600, 400. mean 1300/3; deviations -400/3, 500/3, -100/3 -> std sqrt(140000)/3;
  // sorted 300 400 600: p90 400 + 0.8*200 = 560, p99 400 + 0.98*200 = 596.
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, three_percentiles());
  EXPECT_NEAR(r.e2el.mean_ms, 1300.0 / 3, kTol);
  EXPECT_NEAR(r.e2el.median_ms, 400, kTol);
  EXPECT_NEAR(r.e2el.std_ms, std::sqrt(140000.0) / 3, kTol);
  expect_percentiles(r.e2el, 400, 560, 596);
}

TEST(ServeMetrics, GoodputNeedsEverySlo) {
  auto goodput = [](std::map<std::string, double> slo) {
    BenchmarkConfig c;
    c.goodput_slo_ms = std::move(slo);
    return calculate_metrics(four_traces(), 2.0, c).request_goodput;
  };
  // ttft<=250 and tpot<=100: R0 (100, 50) passes; R1 tpot 200 fails; R2 ttft 400 fails -> 1/2.
  EXPECT_DOUBLE_EQ(goodput({{"ttft", 250}, {"tpot", 100}}), 0.5);
  // tpot<=100 alone: R0 passes, R1 fails, R2 has one token so its TPOT counts as 0 -> 2/2.
  EXPECT_DOUBLE_EQ(goodput({{"tpot", 100}}), 1.0);
  // e2el<=400: R0 300 and R2 exactly 400 pass (the bound is inclusive), R1 600 fails -> 2/2.
  EXPECT_DOUBLE_EQ(goodput({{"e2el", 400}}), 1.0);
  EXPECT_DOUBLE_EQ(goodput({{"e2el", 399}}), 0.5);
  // All three SLOs loose enough for everyone; the failed R3 never counts -> 3/2.
  EXPECT_DOUBLE_EQ(goodput({{"ttft", 1000}, {"tpot", 1000}, {"e2el", 1000}}), 1.5);
}

TEST(ServeMetrics, PeakOutputRateAndConcurrencyFromSecondBuckets) {
  // Token arrivals (start + ttft, then + each gap): R0 0.1 0.15 0.2 0.25 0.3; R1 0.7 0.8 1.1;
  // R2 1.3. Bucket 0 holds 5 + 2 = 7 tokens, bucket 1 holds 2 -> peak 7 tok/s.
  // Active seconds: R0 [0,0], R1 [0,1], R2 [0,1] -> bucket 0 has 3 requests.
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, three_percentiles());
  EXPECT_DOUBLE_EQ(r.max_output_tokens_per_s, 7);
  EXPECT_EQ(r.max_concurrent_requests, 3);
}

TEST(ServeMetrics, PeakBucketsCountFromTheFirstSend) {
  // One request sent at 5.2: tokens at 6.1 and 6.3 are 0.9 s and 1.1 s after the first send, so
  // they fall in different buckets (peak 1), though both lie in wall-clock second 6.
  RequestTrace t{true, "", 4, 2, 0.9, {0.2}, 1.1, 5.2, {}};
  BenchmarkResult r = calculate_metrics({t}, 2.0, BenchmarkConfig{});
  EXPECT_DOUBLE_EQ(r.max_output_tokens_per_s, 1);
  EXPECT_EQ(r.max_concurrent_requests, 1);
  // Explicit chunk arrival times win over the ttft/itl reconstruction: all four in bucket 0.
  RequestTrace u{true, "", 4, 4, 0.5, {1, 1, 1}, 3.5, 0.0, {0.6, 0.7, 0.8, 0.9}};
  r = calculate_metrics({u}, 4.0, BenchmarkConfig{});
  EXPECT_DOUBLE_EQ(r.max_output_tokens_per_s, 4);
  // Without them the gaps of 1 s spread the tokens one per bucket.
  u.token_times_s.clear();
  r = calculate_metrics({u}, 4.0, BenchmarkConfig{});
  EXPECT_DOUBLE_EQ(r.max_output_tokens_per_s, 1);
}

TEST(ServeMetrics, NoSuccessesGivesZerosNotNan) {
  for (const auto& traces : {std::vector<RequestTrace>{}, std::vector<RequestTrace>(2)}) {
    BenchmarkConfig c = three_percentiles();
    c.goodput_slo_ms = {{"ttft", 100}};
    const BenchmarkResult r = calculate_metrics(traces, 1.0, c);
    EXPECT_EQ(r.completed, 0);
    EXPECT_EQ(r.failed, int64_t(traces.size()));
    EXPECT_EQ(r.request_throughput, 0);
    EXPECT_EQ(r.request_goodput, 0);
    EXPECT_EQ(r.max_output_tokens_per_s, 0);
    EXPECT_EQ(r.max_concurrent_requests, 0);
    for (const MetricStats* s : {&r.ttft, &r.tpot, &r.itl, &r.e2el}) {
      EXPECT_EQ(s->mean_ms, 0);
      EXPECT_EQ(s->median_ms, 0);
      EXPECT_EQ(s->std_ms, 0);
      ASSERT_EQ(s->percentiles_ms.size(), 3u);
      for (const auto& [p, v] : s->percentiles_ms) EXPECT_EQ(v, 0);
    }
  }
  // A zero duration leaves the rates at 0 instead of dividing by it.
  const BenchmarkResult r = calculate_metrics(four_traces(), 0.0, BenchmarkConfig{});
  EXPECT_EQ(r.request_throughput, 0);
  EXPECT_EQ(r.total_token_throughput, 0);
  EXPECT_FALSE(std::isnan(r.output_throughput));
}

TEST(ServeMetrics, PrintedBlockMatchesVllmByteForByte) {
  BenchmarkConfig c = three_percentiles();
  c.max_concurrency = 4;
  c.request_rate = 8;
  c.goodput_slo_ms = {{"ttft", 250}, {"tpot", 100}};
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, c);
  // Layout is Python's "{:<40} {:<10}" / "{:<40} {:<10.2f}" with the hand-computed values above.
  const std::string expected =
      "============ Serving Benchmark Result ============\n"
      "Successful requests:                     3         \n"
      "Failed requests:                         1         \n"
      "Maximum request concurrency:             4         \n"
      "Request rate configured (RPS):           8.00      \n"
      "Benchmark duration (s):                  2.00      \n"
      "Total input tokens:                      60        \n"
      "Total generated tokens:                  9         \n"
      "Request throughput (req/s):              1.50      \n"
      "Request goodput (req/s):                 0.50      \n"
      "Output token throughput (tok/s):         4.50      \n"
      "Peak output token throughput (tok/s):    7.00      \n"
      "Peak concurrent requests:                3.00      \n"
      "Total Token throughput (tok/s):          34.50     \n"
      "---------------Time to First Token----------------\n"
      "Mean TTFT (ms):                          233.33    \n"
      "Median TTFT (ms):                        200.00    \n"
      "P50 TTFT (ms):                           200.00    \n"
      "P90 TTFT (ms):                           360.00    \n"
      "P99 TTFT (ms):                           396.00    \n"
      "-----Time per Output Token (excl. 1st token)------\n"
      "Mean TPOT (ms):                          125.00    \n"
      "Median TPOT (ms):                        125.00    \n"
      "P50 TPOT (ms):                           125.00    \n"
      "P90 TPOT (ms):                           185.00    \n"
      "P99 TPOT (ms):                           198.50    \n"
      "---------------Inter-token Latency----------------\n"
      "Mean ITL (ms):                           100.00    \n"
      "Median ITL (ms):                         50.00     \n"
      "P50 ITL (ms):                            50.00     \n"
      "P90 ITL (ms):                            200.00    \n"
      "P99 ITL (ms):                            290.00    \n"
      "----------------End-to-end Latency----------------\n"
      "Mean E2EL (ms):                          433.33    \n"
      "Median E2EL (ms):                        400.00    \n"
      "P50 E2EL (ms):                           400.00    \n"
      "P90 E2EL (ms):                           560.00    \n"
      "P99 E2EL (ms):                           596.00    \n"
      "==================================================\n";
  EXPECT_EQ(format_result_block(r, c), expected);
}

TEST(ServeMetrics, PrintedBlockDefaultsOmitOptionalLines) {
  // Defaults: no concurrency cap, infinite rate, no goodput, sections ttft/tpot/itl with P99.
  const BenchmarkConfig c;
  const std::string block = format_result_block(calculate_metrics(four_traces(), 2.0, c), c);
  EXPECT_EQ(block.find("Maximum request concurrency:"), std::string::npos);
  EXPECT_EQ(block.find("Request rate configured"), std::string::npos);
  EXPECT_EQ(block.find("Request goodput"), std::string::npos);
  EXPECT_EQ(block.find("End-to-end Latency"), std::string::npos);
  EXPECT_EQ(block.find("P50"), std::string::npos);
  EXPECT_NE(block.find("P99 TTFT (ms):                           396.00    \n"), std::string::npos);
  EXPECT_NE(block.find("P99 ITL (ms):                            290.00    \n"), std::string::npos);
}

TEST(ServeMetrics, FractionalPercentileNames) {
  EXPECT_EQ(percentile_word(99), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");
  EXPECT_EQ(percentile_word(12.5), "12.5");
  BenchmarkConfig c;
  c.percentile_metrics = {"ttft"};
  c.metric_percentiles = {99.9};
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, c);
  // TTFT rank 0.999*2 = 1.998 -> 200 + 0.998*200 = 399.6 ms.
  const auto j = result_json(r, c, false);
  ASSERT_TRUE(j.contains("p99.9_ttft_ms"));
  EXPECT_NEAR(j["p99.9_ttft_ms"].get<double>(), 399.6, kTol);
  EXPECT_NE(format_result_block(r, c).find("P99.9 TTFT (ms):                         399.60    \n"),
            std::string::npos);
}

TEST(ServeMetrics, JsonKeysOrderAndValues) {
  BenchmarkConfig c = three_percentiles();
  c.percentile_metrics = {"ttft", "tpot", "itl"};
  c.date = "20261130-120000";
  c.backend = "openai";
  c.model_id = "m";
  c.tokenizer_id = "tok";
  c.num_prompts = 4;
  const BenchmarkResult r = calculate_metrics(four_traces(), 2.0, c);
  const nlohmann::ordered_json j = result_json(r, c, false);
  const std::vector<std::string> head = {"date",
                                         "endpoint_type",
                                         "backend",
                                         "label",
                                         "model_id",
                                         "tokenizer_id",
                                         "num_prompts",
                                         "request_rate",
                                         "burstiness",
                                         "max_concurrency",
                                         "duration",
                                         "completed",
                                         "failed",
                                         "total_input_tokens",
                                         "total_output_tokens",
                                         "request_throughput",
                                         "request_goodput",
                                         "output_throughput",
                                         "total_token_throughput",
                                         "max_output_tokens_per_s",
                                         "max_concurrent_requests"};
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  ASSERT_GE(keys.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + head.size()), head);
  EXPECT_EQ(j["date"], "20261130-120000");
  EXPECT_EQ(j["backend"], "openai");
  EXPECT_TRUE(j["label"].is_null());
  EXPECT_EQ(j["model_id"], "m");
  EXPECT_EQ(j["tokenizer_id"], "tok");
  EXPECT_EQ(j["num_prompts"], 4);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["burstiness"], 1.0);
  EXPECT_TRUE(j["max_concurrency"].is_null());
  EXPECT_TRUE(j["request_goodput"].is_null());
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["total_input_tokens"], 60);
  EXPECT_EQ(j["total_output_tokens"], 9);
  EXPECT_DOUBLE_EQ(j["total_token_throughput"].get<double>(), 34.5);
  EXPECT_DOUBLE_EQ(j["max_output_tokens_per_s"].get<double>(), 7);
  EXPECT_EQ(j["max_concurrent_requests"], 3);
  for (const char* m : {"ttft", "tpot", "itl"}) {
    for (const char* stat : {"mean", "median", "std", "p50", "p90", "p99"}) {
      EXPECT_TRUE(j.contains(std::string(stat) + "_" + m + "_ms")) << stat << "_" << m;
    }
  }
  EXPECT_NEAR(j["p90_ttft_ms"].get<double>(), 360, kTol);
  EXPECT_NEAR(j["std_tpot_ms"].get<double>(), 75, kTol);
  EXPECT_NEAR(j["p99_itl_ms"].get<double>(), 290, kTol);
  EXPECT_FALSE(j.contains("mean_e2el_ms")) << "e2el was not selected";
  EXPECT_FALSE(j.contains("input_lens")) << "per-request arrays only when asked for";
}

TEST(ServeMetrics, JsonPerRequestArraysAndOptionalFields) {
  BenchmarkConfig c;
  c.request_rate = 2.5;
  c.max_concurrency = 8;
  c.label = "run1";
  c.goodput_slo_ms = {{"ttft", 250}, {"tpot", 100}};
  const nlohmann::ordered_json j = result_json(calculate_metrics(four_traces(), 2.0, c), c, true);
  EXPECT_EQ(j["request_rate"], 2.5);
  EXPECT_EQ(j["max_concurrency"], 8);
  EXPECT_EQ(j["label"], "run1");
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), 0.5);
  EXPECT_EQ(j["input_lens"], nlohmann::ordered_json({10, 20, 30, 40}));
  EXPECT_EQ(j["output_lens"], nlohmann::ordered_json({5, 3, 1, 0}));  // failed request reports 0
  EXPECT_EQ(j["ttfts"], nlohmann::ordered_json({0.1, 0.2, 0.4, 0.0}));
  EXPECT_EQ(j["itls"][0], nlohmann::ordered_json({0.05, 0.05, 0.05, 0.05}));
  EXPECT_EQ(j["itls"][2], nlohmann::ordered_json::array());
  EXPECT_EQ(j["errors"], nlohmann::ordered_json({"", "", "", "boom"}));
}

TEST(ServeMetrics, ParseGoodput) {
  auto ok = parse_goodput({"ttft:500", "tpot:50", "e2el:0"});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(*ok, (std::map<std::string, double>{{"ttft", 500}, {"tpot", 50}, {"e2el", 0}}));
  for (const char* bad : {"ttft", "foo:10", "ttft:-1", "ttft:abc", "ttft:", "a:b:c"}) {
    EXPECT_FALSE(parse_goodput({bad}).ok()) << bad;
  }
}

}  // namespace
}  // namespace kestrel::bench
