#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "base/status.h"

namespace kestrel::server {

namespace {

const std::vector<std::string> kLabelNames = {"model_name", "engine"};

// vLLM's FinishReason values; their series exist from start-up so rate() sees the first one.
const char* const kFinishReasons[] = {"stop", "length", "abort", "error", "repetition"};

// Bucket bounds as in vLLM v1's PrometheusStatLogger.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kInterTokenBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                    512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kNParamBuckets = {1, 2, 5, 10, 20};

}  // namespace

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  KCHECK(ec == std::errc(), "formatting a double cannot overflow 64 chars");
  std::string text(buf, end);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

namespace {

// Backslash and newline always; double quotes too inside label values.
std::string escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  return escape(value, true);
}

std::string escape_help_text(std::string_view text) {
  return escape(text, false);
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(static_cast<double>(m * scale));
    }
    // Stop before the next power of ten exceeds the maximum (or int64).
    if (scale > max_value / 10) return out;
  }
}

MetricFamily::MetricFamily(std::string name, std::string help, std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

std::string MetricFamily::label_text(const std::vector<std::string>& values,
                                     std::string_view extra) const {
  if (values.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += label_names_[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra.empty()) {
    if (!values.empty()) out += ',';
    out += extra;
  }
  out += '}';
  return out;
}

void MetricFamily::render_header(std::string_view exposed_name, std::string_view type,
                                 std::string* out) const {
  *out += "# HELP ";
  *out += exposed_name;
  *out += ' ';
  *out += escape_help_text(help_);
  *out += "\n# TYPE ";
  *out += exposed_name;
  *out += ' ';
  *out += type;
  *out += '\n';
}

void MetricFamily::check_arity(const std::vector<std::string>& values) const {
  KCHECK(values.size() == label_names_.size(), "metric {} takes {} label values, got {}", name_,
         label_names_.size(), values.size());
}

void Counter::inc(const std::vector<std::string>& label_values, double amount) {
  check_arity(label_values);
  if (!std::isfinite(amount) || amount < 0) return;
  std::lock_guard lock(mu_);
  series_[label_values] += amount;
}

void Counter::touch(const std::vector<std::string>& label_values) {
  inc(label_values, 0.0);
}

double Counter::value(const std::vector<std::string>& label_values) const {
  std::lock_guard lock(mu_);
  const auto it = series_.find(label_values);
  return it == series_.end() ? 0.0 : it->second;
}

void Counter::render(std::string* out) const {
  // Text format 0.0.4 as prometheus_client writes it: HELP, TYPE and samples all name the
  // `_total` series.
  const std::string exposed = name_ + "_total";
  render_header(exposed, "counter", out);
  std::lock_guard lock(mu_);
  for (const auto& [values, v] : series_) {
    *out += exposed + label_text(values) + ' ' + format_metric_value(v) + '\n';
  }
}

void Gauge::set(const std::vector<std::string>& label_values, double value) {
  check_arity(label_values);
  std::lock_guard lock(mu_);
  series_[label_values] = value;
}

void Gauge::render(std::string* out) const {
  render_header(name_, "gauge", out);
  std::lock_guard lock(mu_);
  for (const auto& [values, v] : series_) {
    *out += name_ + label_text(values) + ' ' + format_metric_value(v) + '\n';
  }
}

Histogram::Histogram(std::string name, std::string help, std::vector<std::string> label_names,
                     std::vector<double> upper_bounds)
    : MetricFamily(std::move(name), std::move(help), std::move(label_names)),
      bounds_(std::move(upper_bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    KCHECK(std::isfinite(bounds_[i]) && (i == 0 || bounds_[i] > bounds_[i - 1]),
           "histogram {}: bucket bounds must be finite and strictly increasing", name_);
  }
}

Histogram::Series& Histogram::series(const std::vector<std::string>& label_values) {
  Series& s = series_[label_values];
  if (s.counts.empty()) s.counts.assign(bounds_.size() + 1, 0);
  return s;
}

void Histogram::observe(const std::vector<std::string>& label_values, double value) {
  check_arity(label_values);
  if (!std::isfinite(value)) return;
  // Prometheus buckets are "less than or equal": the first bound >= value.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard lock(mu_);
  Series& s = series(label_values);
  ++s.counts[bucket];
  s.sum += value;
  ++s.count;
}

void Histogram::touch(const std::vector<std::string>& label_values) {
  check_arity(label_values);
  std::lock_guard lock(mu_);
  series(label_values);
}

void Histogram::add_cumulative(const std::vector<std::string>& label_values,
                               const std::vector<int64_t>& cumulative, int64_t count, double sum) {
  check_arity(label_values);
  KCHECK(cumulative.size() == bounds_.size(), "histogram {}: {} counts for {} bounds", name_,
         cumulative.size(), bounds_.size());
  std::lock_guard lock(mu_);
  Series& s = series(label_values);
  int64_t below = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    s.counts[i] += uint64_t(std::max<int64_t>(0, cumulative[i] - below));
    below = std::max(below, cumulative[i]);
  }
  s.counts.back() += uint64_t(std::max<int64_t>(0, count - below));
  s.count += uint64_t(std::max<int64_t>(0, count));
  s.sum += sum;
}

void Histogram::render(std::string* out) const {
  render_header(name_, "histogram", out);
  std::lock_guard lock(mu_);
  for (const auto& [values, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative += s.counts[i];
      const std::string le =
          i < bounds_.size() ? format_metric_value(bounds_[i]) : std::string("+Inf");
      *out += name_ + "_bucket" + label_text(values, "le=\"" + le + "\"") + ' ' +
              format_metric_value(static_cast<double>(cumulative)) + '\n';
    }
    *out += name_ + "_sum" + label_text(values) + ' ' + format_metric_value(s.sum) + '\n';
    *out += name_ + "_count" + label_text(values) + ' ' +
            format_metric_value(static_cast<double>(s.count)) + '\n';
  }
}

Counter& MetricRegistry::add_counter(std::string name, std::string help,
                                     std::vector<std::string> label_names) {
  auto family = std::make_unique<Counter>(std::move(name), std::move(help), std::move(label_names));
  Counter& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Gauge& MetricRegistry::add_gauge(std::string name, std::string help,
                                 std::vector<std::string> label_names) {
  auto family = std::make_unique<Gauge>(std::move(name), std::move(help), std::move(label_names));
  Gauge& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Histogram& MetricRegistry::add_histogram(std::string name, std::string help,
                                         std::vector<std::string> label_names,
                                         std::vector<double> upper_bounds) {
  auto family = std::make_unique<Histogram>(std::move(name), std::move(help),
                                            std::move(label_names), std::move(upper_bounds));
  Histogram& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

void MetricRegistry::render(std::string* out) const {
  for (const auto& family : families_) family->render(out);
}

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len,
                             const std::vector<int>& engines)
    : model_name_(std::move(model_name)) {
  std::vector<std::string> reason_labels = kLabelNames;
  reason_labels.push_back("finished_reason");
  request_success_ = &registry_.add_counter(
      "vllm:request_success", "Count of successfully processed requests.", reason_labels);
  for (int e : engines)
    for (const char* reason : kFinishReasons)
      request_success_->touch({model_name_, std::to_string(e), reason});

  const std::vector<double> token_buckets = buckets_1_2_5(max_model_len);
  auto histogram = [&](const char* name, const char* help, const std::vector<double>& bounds) {
    Histogram* h = &registry_.add_histogram(name, help, kLabelNames, bounds);
    for (int e : engines) h->touch(labels(e));
    return h;
  };
  prompt_tokens_ =
      histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets);
  generation_tokens_ = histogram("vllm:request_generation_tokens",
                                 "Number of generation tokens processed.", token_buckets);
  iteration_tokens_ =
      histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                kIterationTokenBuckets);
  n_param_ =
      histogram("vllm:request_params_n", "Histogram of the n request parameter.", kNParamBuckets);
  max_tokens_param_ = histogram("vllm:request_params_max_tokens",
                                "Histogram of the max_tokens request parameter.", token_buckets);
  ttft_ = histogram("vllm:time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.", kTtftBuckets);
  inter_token_latency_ =
      histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                kInterTokenBuckets);
  e2e_latency_ = histogram("vllm:e2e_request_latency_seconds",
                           "Histogram of e2e request latency in seconds.", kRequestLatencyBuckets);
  queue_time_ =
      histogram("vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.", kRequestLatencyBuckets);
  inference_time_ =
      histogram("vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.", kRequestLatencyBuckets);
  prefill_time_ =
      histogram("vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.", kRequestLatencyBuckets);
  decode_time_ =
      histogram("vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.", kRequestLatencyBuckets);
}

void ServerMetrics::record_request(const RequestMetricsSample& sample) {
  const std::vector<std::string> base = labels(sample.engine);
  request_success_->inc({model_name_, std::to_string(sample.engine), sample.finished_reason});
  // vLLM records the first-token latency only for requests that produced a token.
  if (sample.generation_tokens > 0) ttft_->observe(base, sample.ttft_s);
  for (double itl : sample.inter_token_latencies_s) inter_token_latency_->observe(base, itl);
  e2e_latency_->observe(base, sample.e2e_s);
  queue_time_->observe(base, sample.queue_time_s);
  inference_time_->observe(base, sample.prefill_time_s + sample.decode_time_s);
  prefill_time_->observe(base, sample.prefill_time_s);
  decode_time_->observe(base, sample.decode_time_s);
  prompt_tokens_->observe(base, static_cast<double>(sample.prompt_tokens));
  generation_tokens_->observe(base, static_cast<double>(sample.generation_tokens));
  if (sample.max_tokens_param > 0) {
    max_tokens_param_->observe(base, static_cast<double>(sample.max_tokens_param));
  }
  if (sample.n > 0) n_param_->observe(base, static_cast<double>(sample.n));
}

void ServerMetrics::record_iteration_tokens(int64_t num_tokens, int engine) {
  iteration_tokens_->observe(labels(engine), static_cast<double>(num_tokens));
}

namespace {

// vLLM's speculative decoding counters (registered only with a speculative config), the
// per-position one labelled "0".."k-1" from the start; one series per engine.
void render_spec_decode(const std::vector<EngineStats>& ranks, const std::string& model,
                        std::string* out) {
  Counter drafts("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", kLabelNames);
  Counter draft_tokens("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", kLabelNames);
  Counter accepted("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                   kLabelNames);
  std::vector<std::string> pos_labels = kLabelNames;
  pos_labels.push_back("position");
  Counter per_pos("vllm:spec_decode_num_accepted_tokens_per_pos",
                  "Accepted tokens per draft position.", pos_labels);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::vector<std::string> base = {model, std::to_string(ranks[r].engine_index)};
    const SpecDecodeStats& s = ranks[r].counters.spec_decode;
    drafts.inc(base, double(s.num_drafts));
    draft_tokens.inc(base, double(s.num_draft_tokens));
    accepted.inc(base, double(s.num_accepted_tokens));
    const size_t k = std::max(size_t(ranks[r].num_speculative_tokens), s.accepted_per_pos.size());
    for (size_t i = 0; i < k; ++i) {
      std::vector<std::string> l = base;
      l.push_back(std::to_string(i));
      per_pos.touch(l);
      if (i < s.accepted_per_pos.size()) per_pos.inc(l, double(s.accepted_per_pos[i]));
    }
  }
  for (const MetricFamily* f :
       std::initializer_list<const MetricFamily*>{&drafts, &draft_tokens, &accepted, &per_pos})
    f->render(out);
}

// Prefill/decode disaggregation (only on an instance with --kv-transfer-config; vLLM's Mooncake
// connector exports none, so these are Kestrel's own): the decode side's loads, the prefill
// side's leases; one series per engine.
void render_kv_transfer(const std::vector<EngineStats>& ranks, const std::string& model,
                        std::string* out) {
  Counter loads("kestrel:kv_transfer_loads", "Prompt KV loads from prefill instances used.",
                kLabelNames);
  Counter failures("kestrel:kv_transfer_load_failures",
                   "Prompt KV loads that failed, timed out or whose lease had lapsed.",
                   kLabelNames);
  Counter recomputes("kestrel:kv_transfer_recomputes",
                     "Requests prefilled locally after their KV load failed.", kLabelNames);
  Counter bytes("kestrel:kv_transfer_bytes", "Bytes of KV loaded from prefill instances.",
                kLabelNames);
  Counter ucx_bytes("kestrel:kv_transfer_ucx_bytes",
                    "Of the KV bytes loaded, those read over UCX (the rest came over TCP).",
                    kLabelNames);
  Counter blocks("kestrel:kv_transfer_blocks", "KV blocks loaded from prefill instances.",
                 kLabelNames);
  Gauge pending("kestrel:kv_transfer_loads_pending",
                "Requests waiting for their prompt's KV from a prefill instance.", kLabelNames);
  Histogram seconds(
      "kestrel:kv_transfer_load_seconds", "Time from a load's start to its last block, in seconds.",
      kLabelNames,
      std::vector<double>(std::begin(kKvLoadSecondsBuckets), std::end(kKvLoadSecondsBuckets)));
  Gauge leases("kestrel:kv_transfer_leases_active",
               "Finished prompts whose KV blocks wait for a decode instance.", kLabelNames);
  Counter leased("kestrel:kv_transfer_leases_created", "Prompt KV leases granted.", kLabelNames);
  Counter released("kestrel:kv_transfer_leases_released",
                   "Prompt KV leases released by a decode instance.", kLabelNames);
  Counter expired("kestrel:kv_transfer_leases_expired",
                  "Prompt KV leases that lapsed without the decode instance's heartbeat.",
                  kLabelNames);
  Gauge states("kestrel:kv_transfer_state_slots_held",
               "Linear-attention state slots held for KV transfers (prompts a decode instance has "
               "yet to read, loads in flight).",
               kLabelNames);
  for (const EngineStats& r : ranks) {
    const std::vector<std::string> base = {model, std::to_string(r.engine_index)};
    const KvTransferStats& k = r.kv;
    states.set(base, double(k.state_slots_held));
    loads.inc(base, double(k.loads));
    failures.inc(base, double(k.load_failures));
    recomputes.inc(base, double(k.recomputes));
    bytes.inc(base, double(k.bytes_loaded));
    ucx_bytes.inc(base, double(k.ucx_bytes_loaded));
    blocks.inc(base, double(k.blocks_loaded));
    pending.set(base, double(k.pending));
    seconds.add_cumulative(base, k.load_seconds_buckets, k.loads, k.load_seconds_sum);
    leases.set(base, double(k.leases.active));
    leased.inc(base, double(k.leases.created));
    released.inc(base, double(k.leases.released));
    expired.inc(base, double(k.leases.expired));
  }
  for (const MetricFamily* f : std::initializer_list<const MetricFamily*>{
           &loads, &failures, &recomputes, &bytes, &ucx_bytes, &blocks, &pending, &seconds, &leases,
           &leased, &released, &expired, &states})
    f->render(out);
}

}  // namespace

std::string ServerMetrics::render(const std::vector<EngineStats>& ranks) const {
  // The engine's values are already cumulative, so they become one-off families per scrape.
  Gauge running("vllm:num_requests_running", "Number of requests in model execution batches.",
                kLabelNames);
  Gauge waiting("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                kLabelNames);
  Gauge kv_usage("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                 kLabelNames);
  Counter queries("vllm:prefix_cache_queries",
                  "Prefix cache queries, in terms of number of queried tokens.", kLabelNames);
  Counter hits("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
               kLabelNames);
  Counter preemptions("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                      kLabelNames);
  Counter prompt("vllm:prompt_tokens", "Number of prefill tokens processed.", kLabelNames);
  Counter generation("vllm:generation_tokens", "Number of generation tokens processed.",
                     kLabelNames);
  // One series per data-parallel engine, labelled by its index as vLLM labels them.
  for (size_t r = 0; r < ranks.size(); ++r) {
    const EngineStats& snapshot = ranks[r];
    const std::vector<std::string> base = {model_name_, std::to_string(snapshot.engine_index)};
    running.set(base, static_cast<double>(snapshot.num_running));
    waiting.set(base, static_cast<double>(snapshot.num_waiting));
    kv_usage.set(base, snapshot.kv_cache_usage);
    queries.inc(base, static_cast<double>(snapshot.prefix_cache_queries));
    hits.inc(base, static_cast<double>(snapshot.prefix_cache_hits));
    preemptions.inc(base, static_cast<double>(snapshot.num_preemptions));
    // vLLM counts each request's whole prompt, prefix-cache hits included, once at its first
    // token. Computed prompt positions plus prefix-cache hit tokens give the same total for
    // requests that are never preempted; a preempted request's recomputed prompt is counted
    // again, as work done.
    prompt.inc(base, static_cast<double>(snapshot.counters.prompt_tokens_computed +
                                         snapshot.prefix_cache_hits));
    generation.inc(base, static_cast<double>(snapshot.counters.generation_tokens));
  }

  std::string out;
  for (const MetricFamily* family : std::initializer_list<const MetricFamily*>{
           &running, &waiting, &kv_usage, &queries, &hits, &preemptions, &prompt, &generation}) {
    family->render(&out);
  }
  if (!ranks.empty() && ranks.front().num_speculative_tokens > 0)
    render_spec_decode(ranks, model_name_, &out);
  if (!ranks.empty() && ranks.front().kv.enabled) render_kv_transfer(ranks, model_name_, &out);
  registry_.render(&out);
  return out;
}

}  // namespace kestrel::server
