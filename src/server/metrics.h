// server/metrics.h — Prometheus metrics for GET /metrics: a small thread-safe registry that
// writes the text exposition format 0.0.4, and ServerMetrics, which exposes the vLLM v1 metric
// names (labels model_name, engine) so dashboards built for `vllm serve` work unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_client.h"

namespace kestrel::server {

// A number as Prometheus (Go's ParseFloat) reads it, written like prometheus_client does:
// integral values keep a ".0" ("1.0"), infinities are "+Inf"/"-Inf", NaN is "NaN".
std::string format_metric_value(double value);
// Label values escape backslash, double quote and newline; HELP text escapes backslash and newline.
std::string escape_label_value(std::string_view value);
std::string escape_help_text(std::string_view text);

// Buckets m·10^k for m in {1, 2, 5}, k = 0, 1, ..., up to and including `max_value`.
std::vector<double> buckets_1_2_5(int64_t max_value);

// One metric family: a name, help text, label names and one series per label-value tuple. Each
// family guards its own series, so recording and rendering may run on any threads.
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names);
  virtual ~MetricFamily() = default;
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  // Appends "# HELP", "# TYPE" and every sample line, series in label-value order.
  virtual void render(std::string* out) const = 0;

 protected:
  // `{a="x",b="y"}` for these values, plus `extra` (e.g. le="0.5") last; "" when empty.
  std::string label_text(const std::vector<std::string>& values, std::string_view extra = {}) const;
  void render_header(std::string_view exposed_name, std::string_view type, std::string* out) const;
  // Label arity must match the family: a mismatch is a programming error.
  void check_arity(const std::vector<std::string>& values) const;

  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
  mutable std::mutex mu_;
};

// A monotonically increasing value, exposed as `<name>_total`. `name` is given without the suffix.
class Counter : public MetricFamily {
 public:
  using MetricFamily::MetricFamily;
  // Negative and non-finite amounts are ignored: a counter never goes down.
  void inc(const std::vector<std::string>& label_values, double amount = 1.0);
  // Creates the series at 0 so it is exposed before its first increment.
  void touch(const std::vector<std::string>& label_values);
  double value(const std::vector<std::string>& label_values) const;
  void render(std::string* out) const override;

 private:
  std::map<std::vector<std::string>, double> series_;
};

class Gauge : public MetricFamily {
 public:
  using MetricFamily::MetricFamily;
  void set(const std::vector<std::string>& label_values, double value);
  void render(std::string* out) const override;

 private:
  std::map<std::vector<std::string>, double> series_;
};

// Cumulative-bucket histogram: `<name>_bucket{le=...}` (upper bounds plus +Inf), `_sum`, `_count`.
class Histogram : public MetricFamily {
 public:
  // `upper_bounds` must be finite and strictly increasing (checked); +Inf is implicit.
  Histogram(std::string name, std::string help, std::vector<std::string> label_names,
            std::vector<double> upper_bounds);
  // Non-finite observations are dropped: they would break the sum and the bucket invariants.
  void observe(const std::vector<std::string>& label_values, double value);
  void touch(const std::vector<std::string>& label_values);
  // Adds observations counted elsewhere: `cumulative[i]` at or below upper_bounds()[i] (one per
  // bound), `count` in all, `sum` of their values.
  void add_cumulative(const std::vector<std::string>& label_values,
                      const std::vector<int64_t>& cumulative, int64_t count, double sum);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  void render(std::string* out) const override;

 private:
  struct Series {
    std::vector<uint64_t> counts;  // per bucket, not cumulative; last is the +Inf overflow
    double sum = 0.0;
    uint64_t count = 0;
  };
  Series& series(const std::vector<std::string>& label_values);  // under mu_

  std::vector<double> bounds_;
  std::map<std::vector<std::string>, Series> series_;
};

// Owns families and renders them in registration order.
class MetricRegistry {
 public:
  Counter& add_counter(std::string name, std::string help, std::vector<std::string> label_names);
  Gauge& add_gauge(std::string name, std::string help, std::vector<std::string> label_names);
  Histogram& add_histogram(std::string name, std::string help, std::vector<std::string> label_names,
                           std::vector<double> upper_bounds);
  void render(std::string* out) const;

 private:
  std::vector<std::unique_ptr<MetricFamily>> families_;
};

// What the server knows about one engine request (one choice) when it finishes.
struct RequestMetricsSample {
  std::string finished_reason;  // stop | length | abort | error
  double queue_time_s = 0.0;    // arrival → first scheduled
  double ttft_s = 0.0;          // arrival → first token; ignored when generation_tokens == 0
  double e2e_s = 0.0;           // arrival → finish
  double prefill_time_s = 0.0;  // first scheduled → first token
  double decode_time_s = 0.0;   // first token → last token
  std::vector<double> inter_token_latencies_s;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t max_tokens_param = 0;  // 0 when the client gave none (vLLM observes only set values)
  // The client's n on one choice of each client request and 0 on the others: vLLM observes n
  // once per client request, while every other field is per choice.
  int64_t n = 0;
  int engine = 0;  // the data-parallel rank that ran it (the engine label)
};

class ServerMetrics {
 public:
  // `max_model_len` sizes the token-count histograms' 1-2-5 buckets, as vLLM does; every
  // engine's series of them exists from the start.
  ServerMetrics(std::string model_name, int64_t max_model_len,
                const std::vector<int>& engines = {0});

  // Thread-safe; call once per finished engine request.
  void record_request(const RequestMetricsSample& sample);
  // Tokens a step of engine `engine` ran through the model (vllm:iteration_tokens_total);
  // thread-safe.
  void record_iteration_tokens(int64_t num_tokens, int engine = 0);

  // The whole /metrics body: engine gauges and cumulative counters from each data-parallel
  // rank's stats (the engine label "0", "1", … as vLLM's), then the request histograms
  // recorded so far.
  std::string render(const std::vector<EngineStats>& ranks) const;

 private:
  std::vector<std::string> labels(int engine) const {
    return {model_name_, std::to_string(engine)};
  }

  std::string model_name_;
  MetricRegistry registry_;
  Counter* request_success_;
  Histogram* ttft_;
  Histogram* inter_token_latency_;
  Histogram* e2e_latency_;
  Histogram* queue_time_;
  Histogram* inference_time_;
  Histogram* prefill_time_;
  Histogram* decode_time_;
  Histogram* prompt_tokens_;
  Histogram* generation_tokens_;
  Histogram* iteration_tokens_;
  Histogram* max_tokens_param_;
  Histogram* n_param_;
};

}  // namespace kestrel::server
