#include "bench/serve_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "bench/offline.h"

namespace kestrel::bench {
namespace {

// numpy's mean/median/std/percentile of seconds, reported in ms. vLLM feeds numpy `values or 0`,
// so an empty list summarises to zeros.
MetricStats summarize(const std::vector<double>& values_s, const std::vector<double>& pcts) {
  MetricStats s;
  double mean = 0, var = 0;
  if (!values_s.empty()) {
    for (double v : values_s) mean += v;
    mean /= double(values_s.size());
    for (double v : values_s) var += (v - mean) * (v - mean);
    var /= double(values_s.size());
  }
  s.mean_ms = mean * 1000;
  s.std_ms = std::sqrt(var) * 1000;
  s.median_ms = percentile(values_s, 50) * 1000;
  for (double p : pcts) s.percentiles_ms.emplace_back(p, percentile(values_s, p) * 1000);
  return s;
}

// The peak rule of vLLM: one-second buckets counted from the earliest successful send; a token
// lands in bucket int(t - t0); a request occupies every bucket from its send to its last byte.
void peak_rates(const std::vector<const RequestTrace*>& ok, BenchmarkResult& r) {
  if (ok.empty()) return;
  double t0 = ok[0]->start_s, t_end = ok[0]->start_s + ok[0]->latency_s;
  for (const RequestTrace* t : ok) {
    t0 = std::min(t0, t->start_s);
    t_end = std::max(t_end, t->start_s + t->latency_s);
  }
  const auto buckets = static_cast<size_t>(std::ceil(t_end - t0)) + 1;
  std::vector<int64_t> tokens(buckets, 0), active(buckets, 0);
  for (const RequestTrace* t : ok) {
    std::vector<double> times = t->token_times_s;
    if (times.empty()) {
      double at = t->start_s + t->ttft_s;
      times.push_back(at);
      for (double gap : t->itl_s) times.push_back(at += gap);
    }
    for (double at : times) {
      // Truncation toward zero, as Python's int(); a bucket outside the range is dropped.
      const auto b = static_cast<int64_t>(at - t0);
      if (b >= 0 && size_t(b) < buckets) ++tokens[size_t(b)];
    }
    const auto first = static_cast<size_t>(t->start_s - t0);
    const auto last = static_cast<size_t>(t->start_s + t->latency_s - t0);
    for (size_t b = first; b <= last && b < buckets; ++b) ++active[b];
  }
  r.max_output_tokens_per_s = double(*std::max_element(tokens.begin(), tokens.end()));
  r.max_concurrent_requests = *std::max_element(active.begin(), active.end());
}

bool selected(const BenchmarkConfig& config, const std::string& metric) {
  const auto& m = config.percentile_metrics;
  return std::find(m.begin(), m.end(), metric) != m.end();
}

struct MetricName {
  const char* key;     // JSON infix
  const char* label;   // in the printed lines
  const char* header;  // section title
  MetricStats BenchmarkResult::*stats;
};

// vLLM's section order.
constexpr MetricName kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &BenchmarkResult::ttft},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &BenchmarkResult::tpot},
    {"itl", "ITL", "Inter-token Latency", &BenchmarkResult::itl},
    {"e2el", "E2EL", "End-to-end Latency", &BenchmarkResult::e2el},
};

}  // namespace

std::string percentile_word(double p) {
  if (std::isfinite(p) && p == std::floor(p) && std::fabs(p) < 1e15) {
    return std::to_string(static_cast<int64_t>(p));
  }
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), p);  // shortest round trip, as repr()
  return std::string(buf, res.ptr);
}

BenchmarkResult calculate_metrics(const std::vector<RequestTrace>& traces, double duration_s,
                                  const BenchmarkConfig& config) {
  BenchmarkResult r;
  r.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  std::vector<double> goodput_tpots;  // 0 for single-token requests, which always pass TPOT
  std::vector<const RequestTrace*> ok;
  for (const RequestTrace& t : traces) {
    r.input_lens.push_back(t.prompt_len);
    r.output_lens.push_back(t.success ? t.output_tokens : 0);
    r.ttfts_s.push_back(t.ttft_s);
    r.itls_s.push_back(t.itl_s);
    r.errors.push_back(t.error);
    if (!t.success) {
      ++r.failed;
      continue;
    }
    ok.push_back(&t);
    ++r.completed;
    r.total_input += t.prompt_len;
    r.total_output += t.output_tokens;
    double tpot = 0;
    if (t.output_tokens > 1) {
      tpot = (t.latency_s - t.ttft_s) / double(t.output_tokens - 1);
      tpots.push_back(tpot);
    }
    goodput_tpots.push_back(tpot);
    itls.insert(itls.end(), t.itl_s.begin(), t.itl_s.end());
    ttfts.push_back(t.ttft_s);
    e2els.push_back(t.latency_s);
  }

  int64_t good = 0;
  if (!config.goodput_slo_ms.empty()) {
    const std::pair<const char*, const std::vector<double>*> slo_metrics[] = {
        {"ttft", &ttfts}, {"tpot", &goodput_tpots}, {"e2el", &e2els}};
    for (size_t i = 0; i < ttfts.size(); ++i) {
      bool meets_all = true;
      for (const auto& [name, values] : slo_metrics) {
        const auto slo = config.goodput_slo_ms.find(name);
        // SLOs compare in seconds, the way vLLM converts them.
        if (slo != config.goodput_slo_ms.end() && !(slo->second / 1000 >= (*values)[i])) {
          meets_all = false;
        }
      }
      good += meets_all;
    }
  }

  if (duration_s > 0) {
    r.request_throughput = double(r.completed) / duration_s;
    r.request_goodput = double(good) / duration_s;
    r.output_throughput = double(r.total_output) / duration_s;
    r.total_token_throughput = double(r.total_input + r.total_output) / duration_s;
  }
  const auto& pcts = config.metric_percentiles;
  r.ttft = summarize(ttfts, pcts);
  r.tpot = summarize(tpots, pcts);
  r.itl = summarize(itls, pcts);
  r.e2el = summarize(e2els, pcts);
  peak_rates(ok, r);
  return r;
}

std::string format_result_block(const BenchmarkResult& r, const BenchmarkConfig& config) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  auto count = [&out](const std::string& label, int64_t v) {
    out += fmt::format("{:<40} {:<10}\n", label, v);
  };
  auto real = [&out](const std::string& label, double v) {
    out += fmt::format("{:<40} {:<10.2f}\n", label, v);
  };
  count("Successful requests:", r.completed);
  count("Failed requests:", r.failed);
  if (config.max_concurrency) count("Maximum request concurrency:", *config.max_concurrency);
  if (!std::isinf(config.request_rate)) real("Request rate configured (RPS):", config.request_rate);
  real("Benchmark duration (s):", r.duration_s);
  count("Total input tokens:", r.total_input);
  count("Total generated tokens:", r.total_output);
  real("Request throughput (req/s):", r.request_throughput);
  if (!config.goodput_slo_ms.empty()) real("Request goodput (req/s):", r.request_goodput);
  real("Output token throughput (tok/s):", r.output_throughput);
  real("Peak output token throughput (tok/s):", r.max_output_tokens_per_s);
  // vLLM prints this count with two decimals too.
  real("Peak concurrent requests:", double(r.max_concurrent_requests));
  real("Total Token throughput (tok/s):", r.total_token_throughput);
  for (const MetricName& m : kMetrics) {
    if (!selected(config, m.key)) continue;
    const MetricStats& s = r.*m.stats;
    out += fmt::format("{:-^50}\n", m.header);
    real(fmt::format("Mean {} (ms):", m.label), s.mean_ms);
    real(fmt::format("Median {} (ms):", m.label), s.median_ms);
    for (const auto& [p, v] : s.percentiles_ms) {
      real(fmt::format("P{} {} (ms):", percentile_word(p), m.label), v);
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::ordered_json result_json(const BenchmarkResult& r, const BenchmarkConfig& config,
                                   bool include_per_request) {
  nlohmann::ordered_json j;
  j["date"] = config.date;
  j["endpoint_type"] = config.backend;  // vLLM keeps this alias for older readers
  j["backend"] = config.backend;
  j["label"] = config.label ? nlohmann::ordered_json(*config.label) : nullptr;
  j["model_id"] = config.model_id;
  j["tokenizer_id"] = config.tokenizer_id;
  j["num_prompts"] = config.num_prompts;
  // JSON has no infinity; vLLM writes the string "inf".
  j["request_rate"] = std::isinf(config.request_rate) ? nlohmann::ordered_json("inf")
                                                      : nlohmann::ordered_json(config.request_rate);
  j["burstiness"] = config.burstiness;
  j["max_concurrency"] =
      config.max_concurrency ? nlohmann::ordered_json(*config.max_concurrency) : nullptr;
  j["duration"] = r.duration_s;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  j["total_input_tokens"] = r.total_input;
  j["total_output_tokens"] = r.total_output;
  j["request_throughput"] = r.request_throughput;
  j["request_goodput"] =
      config.goodput_slo_ms.empty() ? nullptr : nlohmann::ordered_json(r.request_goodput);
  j["output_throughput"] = r.output_throughput;
  j["total_token_throughput"] = r.total_token_throughput;
  if (include_per_request) {
    j["input_lens"] = r.input_lens;
    j["output_lens"] = r.output_lens;
    j["ttfts"] = r.ttfts_s;
    j["itls"] = r.itls_s;
    j["errors"] = r.errors;
  }
  j["max_output_tokens_per_s"] = r.max_output_tokens_per_s;
  j["max_concurrent_requests"] = r.max_concurrent_requests;
  for (const MetricName& m : kMetrics) {
    if (!selected(config, m.key)) continue;
    const MetricStats& s = r.*m.stats;
    j[fmt::format("mean_{}_ms", m.key)] = s.mean_ms;
    j[fmt::format("median_{}_ms", m.key)] = s.median_ms;
    j[fmt::format("std_{}_ms", m.key)] = s.std_ms;
    for (const auto& [p, v] : s.percentiles_ms) {
      j[fmt::format("p{}_{}_ms", percentile_word(p), m.key)] = v;
    }
  }
  return j;
}

Expected<std::map<std::string, double>> parse_goodput(const std::vector<std::string>& pairs) {
  std::map<std::string, double> slos;
  for (const std::string& pair : pairs) {
    const size_t colon = pair.find(':');
    if (colon == std::string::npos || pair.find(':', colon + 1) != std::string::npos) {
      return make_error(
          "Invalid format found for service level objectives: '{}'. Specify them as KEY:VALUE "
          "pairs, where the key is a metric name and the value a number in milliseconds.",
          pair);
    }
    const std::string name = pair.substr(0, colon), text = pair.substr(colon + 1);
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || std::isnan(value)) {
      return make_error("Invalid value for service level objective {}: '{}' is not a number.", name,
                        text);
    }
    if (name != "ttft" && name != "tpot" && name != "e2el") {
      return make_error(
          "Invalid metric name found, {}: {}. The service level objective name should be one of "
          "ttft, tpot, e2el.",
          name, text);
    }
    if (value < 0) {
      return make_error(
          "Invalid value found, {}: {}. The service level objective value should be "
          "non-negative.",
          name, text);
    }
    slos[name] = value;
  }
  return slos;
}

}  // namespace kestrel::bench
