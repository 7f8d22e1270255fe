// Prometheus metrics: the /metrics body must parse as text exposition format 0.0.4 and carry
// vLLM's metric names with hand-computable values.
#include "server/metrics.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_paths.h"

namespace kestrel::server {
namespace {

// ---- A small independent parser for the text format, strict where the spec is. ----

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // declared name → counter|gauge|histogram
  std::map<std::string, std::string> help;   // declared name → unescaped help
  std::vector<Sample> samples;
  std::string error;  // first problem found; empty when the text is valid

  // All samples named `name` whose labels include every pair of `match`.
  std::vector<const Sample*> find(const std::string& name,
                                  const std::map<std::string, std::string>& match = {}) const {
    std::vector<const Sample*> out;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        ok = ok && it != s.labels.end() && it->second == v;
      }
      if (ok) out.push_back(&s);
    }
    return out;
  }
  // The single sample's value, or NaN when there is not exactly one.
  double value(const std::string& name,
               const std::map<std::string, std::string>& match = {}) const {
    auto found = find(name, match);
    return found.size() == 1 ? found[0]->value : std::nan("");
  }
};

bool parse_number(const std::string& text, double* out) {
  if (text == "+Inf") return *out = std::numeric_limits<double>::infinity(), true;
  if (text == "-Inf") return *out = -std::numeric_limits<double>::infinity(), true;
  if (text == "NaN") return *out = std::nan(""), true;
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

bool valid_metric_name(const std::string& name) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(name, re);
}

// Which declared family a sample name belongs to, given the declared types.
std::string family_of(const std::map<std::string, std::string>& types, const std::string& name) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() && it->second == "histogram") return base;
    }
  }
  return "";
}

bool parse_labels(const std::string& line, size_t* pos, std::map<std::string, std::string>* out,
                  std::string* error) {
  ++*pos;  // '{'
  while (*pos < line.size() && line[*pos] != '}') {
    const size_t eq = line.find('=', *pos);
    if (eq == std::string::npos) return *error = "label without '='", false;
    const std::string key = line.substr(*pos, eq - *pos);
    static const std::regex label_re("[a-zA-Z_][a-zA-Z0-9_]*");
    if (!std::regex_match(key, label_re)) return *error = "bad label name '" + key + "'", false;
    *pos = eq + 1;
    if (*pos >= line.size() || line[*pos] != '"') return *error = "label value not quoted", false;
    ++*pos;
    std::string value;
    while (true) {
      if (*pos >= line.size()) return *error = "unterminated label value", false;
      const char c = line[(*pos)++];
      if (c == '"') break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (*pos >= line.size()) return *error = "dangling backslash", false;
      const char e = line[(*pos)++];
      if (e == 'n') {
        value += '\n';
      } else if (e == '\\' || e == '"') {
        value += e;
      } else {
        return *error = "bad escape in label value", false;
      }
    }
    if (out->count(key)) return *error = "duplicate label " + key, false;
    (*out)[key] = value;
    if (*pos < line.size() && line[*pos] == ',') ++*pos;
  }
  if (*pos >= line.size()) return *error = "unterminated label set", false;
  ++*pos;  // '}'
  return true;
}

std::string unescape_help(const std::string& text, std::string* error) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i >= text.size()) return *error = "dangling backslash in HELP", "";
    if (text[i] == 'n') {
      out += '\n';
    } else if (text[i] == '\\') {
      out += '\\';
    } else {
      *error = "bad escape in HELP";
    }
  }
  return out;
}

// Checks per-family ordering and the histogram invariants; fills `error` on the first problem.
void check_histograms(Exposition* e) {
  for (const auto& [family, type] : e->types) {
    if (type != "histogram") continue;
    // Group by labels without "le".
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
    std::map<std::map<std::string, std::string>, double> counts;
    for (const Sample& s : e->samples) {
      auto labels = s.labels;
      if (s.name == family + "_bucket") {
        auto le = labels.find("le");
        double bound = 0;
        if (le == labels.end() || !parse_number(le->second, &bound)) {
          e->error = family + ": bucket without a numeric le";
          return;
        }
        labels.erase(le);
        buckets[labels].push_back({bound, s.value});
      } else if (s.name == family + "_count") {
        counts[labels] = s.value;
      }
    }
    if (buckets.empty()) e->error = family + ": no buckets";
    for (const auto& [labels, list] : buckets) {
      for (size_t i = 1; i < list.size(); ++i) {
        if (!(list[i].first > list[i - 1].first)) e->error = family + ": le not increasing";
        if (list[i].second < list[i - 1].second) e->error = family + ": bucket counts decrease";
      }
      if (list.empty() || !std::isinf(list.back().first)) e->error = family + ": no +Inf bucket";
      auto c = counts.find(labels);
      if (c == counts.end() || c->second != list.back().second)
        e->error = family + ": +Inf bucket differs from _count";
      if (e->find(family + "_sum").empty()) e->error = family + ": no _sum";
    }
  }
}

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::set<std::string> families_with_samples;
  std::set<std::string> series_seen;
  std::string current_family;
  std::istringstream in(text);
  std::string line;
  if (!text.empty() && text.back() != '\n') e.error = "body does not end with a newline";
  while (e.error.empty() && std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line);
      std::string hash, kind, name;
      words >> hash >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") continue;  // plain comment
      if (!valid_metric_name(name)) e.error = "bad metric name in " + line;
      if (families_with_samples.count(name)) e.error = kind + " after samples of " + name;
      const size_t start = line.find(name, 2 + kind.size()) + name.size();
      const std::string rest = start < line.size() ? line.substr(start + 1) : "";
      if (kind == "TYPE") {
        if (e.types.count(name)) e.error = "second TYPE for " + name;
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped")
          e.error = "unknown type '" + rest + "'";
        e.types[name] = rest;
      } else {
        if (e.help.count(name)) e.error = "second HELP for " + name;
        e.help[name] = unescape_help(rest, &e.error);
      }
      continue;
    }
    Sample s;
    size_t pos = 0;
    while (pos < line.size() && line[pos] != '{' && line[pos] != ' ') ++pos;
    s.name = line.substr(0, pos);
    if (!valid_metric_name(s.name)) {
      e.error = "bad sample name in '" + line + "'";
      break;
    }
    if (pos < line.size() && line[pos] == '{' && !parse_labels(line, &pos, &s.labels, &e.error))
      break;
    if (pos >= line.size() || line[pos] != ' ') {
      e.error = "no space before the value in '" + line + "'";
      break;
    }
    if (!parse_number(line.substr(pos + 1), &s.value)) {
      e.error = "bad value in '" + line + "'";
      break;
    }
    const std::string family = family_of(e.types, s.name);
    if (family.empty()) {
      e.error = "sample before its TYPE: " + s.name;
      break;
    }
    // A family's samples must be contiguous.
    if (family != current_family && families_with_samples.count(family)) {
      e.error = "samples of " + family + " are split";
      break;
    }
    current_family = family;
    families_with_samples.insert(family);
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += "|" + k + "=" + v;
    if (!series_seen.insert(key).second) {
      e.error = "duplicate series " + key;
      break;
    }
    e.samples.push_back(std::move(s));
  }
  if (e.error.empty()) check_histograms(&e);
  return e;
}

// ---- Helpers ----

const std::map<std::string, std::string> kBase = {{"model_name", "m"}, {"engine", "0"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> labels,
                                        const std::string& key, const std::string& value) {
  labels[key] = value;
  return labels;
}

// Cumulative count of bucket `le` of a histogram series.
double bucket(const Exposition& e, const std::string& family, const std::string& le) {
  return e.value(family + "_bucket", with(kBase, "le", le));
}

EngineStats sample_stats() {
  EngineStats s;
  s.num_running = 3;
  s.num_waiting = 7;
  s.kv_cache_usage = 0.625;
  s.prefix_cache_queries = 4096;
  s.prefix_cache_hits = 1024;
  s.num_preemptions = 2;
  s.counters.steps = 50;
  s.counters.scheduled_tokens = 9000;
  s.counters.prompt_tokens_computed = 3072;
  s.counters.generation_tokens = 777;
  return s;
}

// ---- Tests ----

TEST(MetricsFormat, Values) {
  EXPECT_EQ(format_metric_value(1.0), "1.0");
  EXPECT_EQ(format_metric_value(3.0), "3.0");
  EXPECT_EQ(format_metric_value(0.0), "0.0");
  EXPECT_EQ(format_metric_value(-2.0), "-2.0");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(0.001), "0.001");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
  // Whatever the spelling, a value must read back exactly.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mantissa(-10.0, 10.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (int i = 0; i < 2000; ++i) {
    const double v = std::ldexp(mantissa(rng), exponent(rng));
    double back = 0;
    ASSERT_TRUE(parse_number(format_metric_value(v), &back)) << v;
    EXPECT_EQ(back, v);
  }
  double big = 0;
  ASSERT_TRUE(parse_number(format_metric_value(1e300), &big));
  EXPECT_EQ(big, 1e300);
}

TEST(MetricsFormat, Escaping) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_help_text("x\\y\nz\"q"), "x\\\\y\\nz\"q");
}

TEST(MetricsFormat, Buckets125) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(4096),
            (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}));
  EXPECT_EQ(buckets_1_2_5(7), (std::vector<double>{1, 2, 5}));
  EXPECT_TRUE(buckets_1_2_5(0).empty());
  EXPECT_TRUE(buckets_1_2_5(-5).empty());
  const auto huge = buckets_1_2_5(std::numeric_limits<int64_t>::max());
  ASSERT_FALSE(huge.empty());
  EXPECT_EQ(huge.back(), 5e18);
}

TEST(MetricsRegistry, HistogramHandComputed) {
  MetricRegistry registry;
  Histogram& h = registry.add_histogram("t_seconds", "A test.", {"k"}, {0.1, 0.5, 1.0, 10.0});
  for (double v : {0.05, 0.3, 0.3, 1.0, 2.0, 100.0}) h.observe({"a"}, v);
  h.observe({"a"}, std::nan(""));  // dropped
  h.observe({"b"}, 0.5);
  std::string text;
  registry.render(&text);
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  EXPECT_EQ(e.types.at("t_seconds"), "histogram");
  const std::map<std::string, std::string> a = {{"k", "a"}};
  EXPECT_EQ(e.value("t_seconds_bucket", with(a, "le", "0.1")), 1);
  EXPECT_EQ(e.value("t_seconds_bucket", with(a, "le", "0.5")), 3);
  EXPECT_EQ(e.value("t_seconds_bucket", with(a, "le", "1.0")), 4);  // 1.0 <= 1.0
  EXPECT_EQ(e.value("t_seconds_bucket", with(a, "le", "10.0")), 5);
  EXPECT_EQ(e.value("t_seconds_bucket", with(a, "le", "+Inf")), 6);
  EXPECT_EQ(e.value("t_seconds_count", a), 6);
  EXPECT_NEAR(e.value("t_seconds_sum", a), 0.05 + 0.3 + 0.3 + 1.0 + 2.0 + 100.0, 1e-12);
  EXPECT_EQ(e.value("t_seconds_bucket", {{"k", "b"}, {"le", "0.1"}}), 0);
  EXPECT_EQ(e.value("t_seconds_bucket", {{"k", "b"}, {"le", "0.5"}}), 1);
  EXPECT_EQ(e.value("t_seconds_count", {{"k", "b"}}), 1);
}

TEST(MetricsRegistry, CounterTotalSuffixAndNoDecrease) {
  MetricRegistry registry;
  Counter& c = registry.add_counter("x:things", "Things.", {"k"});
  c.inc({"a"}, 2.5);
  c.inc({"a"});
  c.inc({"a"}, -10.0);
  c.inc({"a"}, std::numeric_limits<double>::infinity());
  Gauge& g = registry.add_gauge("x:level", "Level.", {});
  g.set({}, -4.0);
  std::string text;
  registry.render(&text);
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  EXPECT_EQ(e.types.at("x:things_total"), "counter");
  EXPECT_EQ(e.value("x:things_total", {{"k", "a"}}), 3.5);
  EXPECT_EQ(e.types.at("x:level"), "gauge");
  EXPECT_EQ(e.value("x:level"), -4.0);
  EXPECT_NE(text.find("x:level -4.0\n"), std::string::npos) << text;
}

TEST(MetricsServer, EachDataParallelEngineHasItsOwnSeries) {
  ServerMetrics metrics("m", 4096);
  EngineStats second = sample_stats();
  second.num_running = 5;
  second.counters.generation_tokens = 100;
  second.engine_index = 1;
  const Exposition e = parse_exposition(metrics.render({sample_stats(), second}));
  ASSERT_EQ(e.error, "");
  const std::map<std::string, std::string> engine1 = {{"model_name", "m"}, {"engine", "1"}};
  EXPECT_EQ(e.value("vllm:num_requests_running", kBase), 3);
  EXPECT_EQ(e.value("vllm:num_requests_running", engine1), 5);
  EXPECT_EQ(e.value("vllm:generation_tokens_total", kBase), 777);
  EXPECT_EQ(e.value("vllm:generation_tokens_total", engine1), 100);
}

TEST(MetricsServer, RequestHistogramsAreLabelledWithTheEngineThatRanTheRequest) {
  ServerMetrics metrics("m", 4096, {0, 1});
  RequestMetricsSample a;
  a.finished_reason = "stop";
  a.ttft_s = 0.1;
  a.e2e_s = 0.5;
  a.generation_tokens = 3;
  RequestMetricsSample b = a;
  b.engine = 1;
  b.finished_reason = "length";
  metrics.record_request(a);
  metrics.record_request(b);
  metrics.record_request(b);
  metrics.record_iteration_tokens(7, 1);
  const Exposition e = parse_exposition(metrics.render({sample_stats()}));
  ASSERT_EQ(e.error, "");
  const std::map<std::string, std::string> engine1 = {{"model_name", "m"}, {"engine", "1"}};
  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_count", kBase), 1);
  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_count", engine1), 2);
  EXPECT_EQ(e.value("vllm:request_success_total", with(engine1, "finished_reason", "length")), 2);
  EXPECT_EQ(e.value("vllm:request_success_total", with(kBase, "finished_reason", "length")), 0);
  EXPECT_EQ(e.value("vllm:iteration_tokens_total_count", engine1), 1);
  EXPECT_EQ(e.value("vllm:iteration_tokens_total_count", kBase), 0);  // there from the start
}

TEST(MetricsServer, SnapshotGaugesAndCounters) {
  ServerMetrics metrics("m", 4096);
  const std::string text = metrics.render({sample_stats()});
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  EXPECT_EQ(e.types.at("vllm:num_requests_running"), "gauge");
  EXPECT_EQ(e.value("vllm:num_requests_running", kBase), 3);
  EXPECT_EQ(e.value("vllm:num_requests_waiting", kBase), 7);
  EXPECT_EQ(e.value("vllm:kv_cache_usage_perc", kBase), 0.625);
  EXPECT_EQ(e.types.at("vllm:prefix_cache_queries_total"), "counter");
  EXPECT_EQ(e.value("vllm:prefix_cache_queries_total", kBase), 4096);
  EXPECT_EQ(e.value("vllm:prefix_cache_hits_total", kBase), 1024);
  EXPECT_EQ(e.value("vllm:num_preemptions_total", kBase), 2);
  // Whole prompts as vLLM counts them: computed positions plus prefix-cache hits.
  EXPECT_EQ(e.value("vllm:prompt_tokens_total", kBase), 3072 + 1024);
  EXPECT_EQ(e.value("vllm:generation_tokens_total", kBase), 777);
  // Before any request every finish reason is exposed at zero and histograms are empty.
  for (const char* reason : {"stop", "length", "abort", "error", "repetition"}) {
    EXPECT_EQ(e.value("vllm:request_success_total", with(kBase, "finished_reason", reason)), 0)
        << reason;
  }
  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_count", kBase), 0);
  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_bucket", with(kBase, "le", "+Inf")), 0);
}

TEST(MetricsServer, SpecDecodeCountersOnlyWithASpeculativeConfig) {
  ServerMetrics metrics("m", 4096);
  EngineStats stats = sample_stats();
  EXPECT_EQ(metrics.render({stats}).find("vllm:spec_decode"), std::string::npos);
  stats.num_speculative_tokens = 3;
  // Two steps: 3 drafts with 2 accepted, then 3 with 0 accepted.
  stats.counters.spec_decode.observe(3, 2);
  stats.counters.spec_decode.observe(3, 0);
  const std::string text = metrics.render({stats});
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  EXPECT_EQ(e.types.at("vllm:spec_decode_num_drafts_total"), "counter");
  EXPECT_EQ(e.value("vllm:spec_decode_num_drafts_total", kBase), 2);
  EXPECT_EQ(e.value("vllm:spec_decode_num_draft_tokens_total", kBase), 6);
  EXPECT_EQ(e.value("vllm:spec_decode_num_accepted_tokens_total", kBase), 2);
  const char* per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
  EXPECT_EQ(e.value(per_pos, with(kBase, "position", "0")), 1);
  EXPECT_EQ(e.value(per_pos, with(kBase, "position", "1")), 1);
  // Every position is exposed, at zero before its first acceptance.
  EXPECT_EQ(e.value(per_pos, with(kBase, "position", "2")), 0);
  EXPECT_TRUE(e.find(per_pos, with(kBase, "position", "3")).empty());
}

TEST(MetricsServer, KvTransferFamiliesOnlyWithAConnector) {
  ServerMetrics metrics("m", 4096);
  EngineStats stats = sample_stats();
  EXPECT_EQ(metrics.render({stats}).find("kv_transfer"), std::string::npos);
  KvTransferStats& k = stats.kv;
  k.enabled = true;
  k.pending = 2;
  k.loads = 3;
  k.load_failures = 1;
  k.recomputes = 1;
  k.bytes_loaded = 4096;
  k.ucx_bytes_loaded = 1024;
  k.blocks_loaded = 5;
  // Loads of 0.004 s, 0.02 s and 60 s (past the last bound): cumulative per bound.
  for (size_t b = 0; b < k.load_seconds_buckets.size(); ++b)
    k.load_seconds_buckets[b] =
        (kKvLoadSecondsBuckets[b] >= 0.004) + (kKvLoadSecondsBuckets[b] >= 0.02);
  k.load_seconds_sum = 60.024;
  k.leases = LeaseStats{1, 7, 5, 1};
  k.state_slots_held = 3;
  const std::string text = metrics.render({stats});
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  EXPECT_EQ(e.types.at("kestrel:kv_transfer_loads_total"), "counter");
  EXPECT_EQ(e.value("kestrel:kv_transfer_loads_total", kBase), 3);
  EXPECT_EQ(e.value("kestrel:kv_transfer_load_failures_total", kBase), 1);
  EXPECT_EQ(e.value("kestrel:kv_transfer_recomputes_total", kBase), 1);
  EXPECT_EQ(e.value("kestrel:kv_transfer_bytes_total", kBase), 4096);
  EXPECT_EQ(e.value("kestrel:kv_transfer_ucx_bytes_total", kBase), 1024);
  EXPECT_EQ(e.value("kestrel:kv_transfer_blocks_total", kBase), 5);
  EXPECT_EQ(e.value("kestrel:kv_transfer_loads_pending", kBase), 2);
  EXPECT_EQ(e.types.at("kestrel:kv_transfer_load_seconds"), "histogram");
  const char* b = "kestrel:kv_transfer_load_seconds_bucket";
  EXPECT_EQ(e.value(b, with(kBase, "le", "0.0025")), 0);
  EXPECT_EQ(e.value(b, with(kBase, "le", "0.005")), 1);
  EXPECT_EQ(e.value(b, with(kBase, "le", "0.025")), 2);
  EXPECT_EQ(e.value(b, with(kBase, "le", "30.0")), 2);
  EXPECT_EQ(e.value(b, with(kBase, "le", "+Inf")), 3);
  EXPECT_EQ(e.value("kestrel:kv_transfer_load_seconds_count", kBase), 3);
  EXPECT_NEAR(e.value("kestrel:kv_transfer_load_seconds_sum", kBase), 60.024, 1e-9);
  EXPECT_EQ(e.value("kestrel:kv_transfer_leases_active", kBase), 1);
  EXPECT_EQ(e.value("kestrel:kv_transfer_leases_created_total", kBase), 7);
  EXPECT_EQ(e.value("kestrel:kv_transfer_leases_released_total", kBase), 5);
  EXPECT_EQ(e.value("kestrel:kv_transfer_leases_expired_total", kBase), 1);
  EXPECT_EQ(e.types.at("kestrel:kv_transfer_state_slots_held"), "gauge");
  EXPECT_EQ(e.value("kestrel:kv_transfer_state_slots_held", kBase), 3);
}

TEST(MetricsServer, BucketBoundsFollowVllm) {
  ServerMetrics metrics("m", 2048);
  const Exposition e = parse_exposition(metrics.render({EngineStats{}}));
  ASSERT_EQ(e.error, "");
  auto bounds = [&](const std::string& family) {
    std::vector<std::string> out;
    for (const Sample* s : e.find(family + "_bucket", kBase)) out.push_back(s->labels.at("le"));
    return out;
  };
  EXPECT_EQ(bounds("vllm:request_prompt_tokens"),
            (std::vector<std::string>{"1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0",
                                      "500.0", "1000.0", "2000.0", "+Inf"}));
  EXPECT_EQ(bounds("vllm:request_params_n"),
            (std::vector<std::string>{"1.0", "2.0", "5.0", "10.0", "20.0", "+Inf"}));
  const auto ttft = bounds("vllm:time_to_first_token_seconds");
  ASSERT_EQ(ttft.size(), 23u);
  EXPECT_EQ(ttft.front(), "0.001");
  EXPECT_EQ(ttft[21], "2560.0");
  const auto itl = bounds("vllm:inter_token_latency_seconds");
  ASSERT_EQ(itl.size(), 20u);
  EXPECT_EQ(itl.front(), "0.01");
  EXPECT_EQ(itl[18], "80.0");
  const auto e2e = bounds("vllm:e2e_request_latency_seconds");
  ASSERT_EQ(e2e.size(), 22u);
  EXPECT_EQ(e2e.front(), "0.3");
  EXPECT_EQ(e2e[20], "7680.0");
  const auto iter = bounds("vllm:iteration_tokens_total");
  ASSERT_EQ(iter.size(), 14u);
  EXPECT_EQ(iter[12], "16384.0");
}

TEST(MetricsServer, RequestHistogramsHandComputed) {
  ServerMetrics metrics("m", 1000);
  RequestMetricsSample a;
  a.finished_reason = "stop";
  a.queue_time_s = 0.2;
  a.ttft_s = 0.045;
  a.e2e_s = 1.2;
  a.prefill_time_s = 0.03;
  a.decode_time_s = 0.9;
  a.inter_token_latencies_s = {0.02, 0.03, 0.2};
  a.prompt_tokens = 37;
  a.generation_tokens = 4;
  a.max_tokens_param = 64;
  a.n = 2;
  RequestMetricsSample b;  // second choice of the same request, cut by length
  b.finished_reason = "length";
  b.queue_time_s = 0.2;
  b.ttft_s = 0.05;
  b.e2e_s = 3.0;
  b.prefill_time_s = 0.03;
  b.decode_time_s = 2.7;
  b.inter_token_latencies_s = {0.5};
  b.prompt_tokens = 37;
  b.generation_tokens = 2;
  b.max_tokens_param = 64;
  b.n = 0;
  RequestMetricsSample c;  // aborted while waiting: no token, no max_tokens given
  c.finished_reason = "abort";
  c.queue_time_s = 4.0;
  c.ttft_s = 99.0;  // meaningless without a token; must be ignored
  c.e2e_s = 4.0;
  c.prompt_tokens = 600;
  for (const auto& s : {a, b, c}) metrics.record_request(s);
  metrics.record_iteration_tokens(12);
  metrics.record_iteration_tokens(300);

  const std::string text = metrics.render({EngineStats{}});
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  auto success = [&](const char* reason) {
    return e.value("vllm:request_success_total", with(kBase, "finished_reason", reason));
  };
  EXPECT_EQ(success("stop"), 1);
  EXPECT_EQ(success("length"), 1);
  EXPECT_EQ(success("abort"), 1);
  EXPECT_EQ(success("error"), 0);

  EXPECT_EQ(e.value("vllm:time_to_first_token_seconds_count", kBase), 2);
  EXPECT_NEAR(e.value("vllm:time_to_first_token_seconds_sum", kBase), 0.095, 1e-12);
  EXPECT_EQ(bucket(e, "vllm:time_to_first_token_seconds", "0.04"), 0);
  EXPECT_EQ(bucket(e, "vllm:time_to_first_token_seconds", "0.06"), 2);

  EXPECT_EQ(e.value("vllm:inter_token_latency_seconds_count", kBase), 4);
  EXPECT_NEAR(e.value("vllm:inter_token_latency_seconds_sum", kBase), 0.75, 1e-12);
  EXPECT_EQ(bucket(e, "vllm:inter_token_latency_seconds", "0.025"), 1);
  EXPECT_EQ(bucket(e, "vllm:inter_token_latency_seconds", "0.05"), 2);
  EXPECT_EQ(bucket(e, "vllm:inter_token_latency_seconds", "0.2"), 3);
  EXPECT_EQ(bucket(e, "vllm:inter_token_latency_seconds", "0.5"), 4);

  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_count", kBase), 3);
  EXPECT_NEAR(e.value("vllm:e2e_request_latency_seconds_sum", kBase), 8.2, 1e-12);
  EXPECT_EQ(bucket(e, "vllm:e2e_request_latency_seconds", "1.0"), 0);
  EXPECT_EQ(bucket(e, "vllm:e2e_request_latency_seconds", "1.5"), 1);
  EXPECT_EQ(bucket(e, "vllm:e2e_request_latency_seconds", "5.0"), 3);
  EXPECT_NEAR(e.value("vllm:request_queue_time_seconds_sum", kBase), 4.4, 1e-12);
  EXPECT_NEAR(e.value("vllm:request_prefill_time_seconds_sum", kBase), 0.06, 1e-12);
  EXPECT_NEAR(e.value("vllm:request_decode_time_seconds_sum", kBase), 3.6, 1e-12);
  EXPECT_NEAR(e.value("vllm:request_inference_time_seconds_sum", kBase), 3.66, 1e-12);

  EXPECT_EQ(e.value("vllm:request_prompt_tokens_sum", kBase), 674);
  EXPECT_EQ(bucket(e, "vllm:request_prompt_tokens", "50.0"), 2);
  EXPECT_EQ(bucket(e, "vllm:request_prompt_tokens", "500.0"), 2);
  EXPECT_EQ(bucket(e, "vllm:request_prompt_tokens", "1000.0"), 3);
  EXPECT_EQ(e.value("vllm:request_generation_tokens_sum", kBase), 6);
  EXPECT_EQ(e.value("vllm:request_generation_tokens_count", kBase), 3);
  EXPECT_EQ(bucket(e, "vllm:request_generation_tokens", "1.0"), 1);  // the abort's 0 tokens

  EXPECT_EQ(e.value("vllm:request_params_max_tokens_count", kBase), 2);
  EXPECT_EQ(e.value("vllm:request_params_max_tokens_sum", kBase), 128);
  EXPECT_EQ(e.value("vllm:request_params_n_count", kBase), 1);
  EXPECT_EQ(bucket(e, "vllm:request_params_n", "1.0"), 0);
  EXPECT_EQ(bucket(e, "vllm:request_params_n", "2.0"), 1);

  EXPECT_EQ(e.value("vllm:iteration_tokens_total_count", kBase), 2);
  EXPECT_EQ(e.value("vllm:iteration_tokens_total_sum", kBase), 312);
  EXPECT_EQ(bucket(e, "vllm:iteration_tokens_total", "16.0"), 1);
  EXPECT_EQ(bucket(e, "vllm:iteration_tokens_total", "256.0"), 1);
  EXPECT_EQ(bucket(e, "vllm:iteration_tokens_total", "512.0"), 2);
}

TEST(MetricsServer, LabelEscapingRoundTrips) {
  const std::string name = "org/model \"v2\"\\beta\nline";
  ServerMetrics metrics(name, 128);
  RequestMetricsSample s;
  s.finished_reason = "we\"ird\\";
  s.e2e_s = 0.4;
  metrics.record_request(s);
  const std::string text = metrics.render({sample_stats()});
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  const std::map<std::string, std::string> base = {{"model_name", name}, {"engine", "0"}};
  EXPECT_EQ(e.value("vllm:num_requests_waiting", base), 7);
  EXPECT_EQ(e.value("vllm:request_success_total", with(base, "finished_reason", "we\"ird\\")), 1);
  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_count", base), 1);
  // A raw newline in a value would split the sample line.
  for (const Sample& sample : e.samples) EXPECT_EQ(sample.labels.at("model_name"), name);
}

TEST(MetricsServer, HelpPrecedesSamplesAndMatchesVllm) {
  ServerMetrics metrics("m", 512);
  const std::string text = metrics.render({EngineStats{}});
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.error, "") << text;
  for (const auto& [name, type] : e.types) EXPECT_TRUE(e.help.count(name)) << name;
  EXPECT_EQ(e.help.at("vllm:time_to_first_token_seconds"),
            "Histogram of time to first token in seconds.");
  EXPECT_EQ(e.types.at("vllm:request_success_total"), "counter");
  EXPECT_EQ(e.types.at("vllm:iteration_tokens_total"), "histogram");
}

TEST(MetricsServer, ConcurrentRecordsAreExact) {
  ServerMetrics metrics("m", 8192);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 400;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < kPerThread; ++i) {
        RequestMetricsSample s;
        s.finished_reason = (i % 3 == 0) ? "length" : "stop";
        s.ttft_s = 0.01 * (t + 1);
        s.e2e_s = 0.5 + 0.001 * i;
        s.inter_token_latencies_s = {0.02, 0.04};
        s.prompt_tokens = 10 + t;
        s.generation_tokens = 3;
        s.n = 1;
        metrics.record_request(s);
        metrics.record_iteration_tokens(t + 1);
      }
    });
  }
  // Scrapes racing the writers must always be valid.
  std::thread scraper([&metrics] {
    for (int i = 0; i < 50; ++i) {
      const Exposition e = parse_exposition(metrics.render({sample_stats()}));
      ASSERT_EQ(e.error, "");
    }
  });
  for (auto& th : threads) th.join();
  scraper.join();

  const Exposition e = parse_exposition(metrics.render({EngineStats{}}));
  ASSERT_EQ(e.error, "");
  const int per_thread_length = (kPerThread + 2) / 3;  // i % 3 == 0
  EXPECT_EQ(e.value("vllm:request_success_total", with(kBase, "finished_reason", "length")),
            kThreads * per_thread_length);
  EXPECT_EQ(e.value("vllm:request_success_total", with(kBase, "finished_reason", "stop")),
            kThreads * (kPerThread - per_thread_length));
  EXPECT_EQ(e.value("vllm:time_to_first_token_seconds_count", kBase), kThreads * kPerThread);
  EXPECT_EQ(e.value("vllm:inter_token_latency_seconds_count", kBase), 2 * kThreads * kPerThread);
  EXPECT_EQ(e.value("vllm:request_params_n_count", kBase), kThreads * kPerThread);
  // Sum over t of (10 + t) * kPerThread, in integers: exact in double.
  EXPECT_EQ(e.value("vllm:request_prompt_tokens_sum", kBase), kPerThread * (10 * 8 + 28));
  EXPECT_EQ(e.value("vllm:iteration_tokens_total_sum", kBase), kPerThread * 36);
  EXPECT_EQ(bucket(e, "vllm:iteration_tokens_total", "1.0"), kPerThread);
  EXPECT_EQ(bucket(e, "vllm:iteration_tokens_total", "8.0"), kThreads * kPerThread);
}

// Every name in vllm-compat.md §3 except speculative decoding, which Kestrel does not run.
const std::vector<std::string> kCompatNames = {
    "vllm:num_requests_running",        "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",         "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",     "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",     "vllm:num_preemptions_total",
    "vllm:request_success_total",       "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",  "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",   "vllm:iteration_tokens_total"};

std::string compat_doc_path() {
  return kestrel::test::shared_dir() + "/docs/reference/vllm-compat.md";
}

// The metric names listed in §3 (Prometheus) of the shared reference.
std::vector<std::string> names_from_compat_doc() {
  std::ifstream in(compat_doc_path());
  std::vector<std::string> out;
  std::string line;
  bool in_section = false;
  const std::regex name_re("`(vllm:[a-z0-9_]+)");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line.find("Prometheus") != std::string::npos;
    if (!in_section) continue;
    for (std::sregex_iterator it(line.begin(), line.end(), name_re), end; it != end; ++it) {
      const std::string name = (*it)[1];
      if (name.find("spec_decode") == std::string::npos) out.push_back(name);
    }
  }
  return out;
}

void expect_exposed(const std::vector<std::string>& names) {
  ServerMetrics metrics("m", 4096);
  const Exposition e = parse_exposition(metrics.render({sample_stats()}));
  ASSERT_EQ(e.error, "");
  for (const std::string& name : names) {
    EXPECT_TRUE(e.types.count(name)) << name << " has no TYPE";
    const bool histogram = e.types.count(name) && e.types.at(name) == "histogram";
    EXPECT_FALSE(e.find(histogram ? name + "_count" : name, kBase).empty()) << name;
  }
}

TEST(MetricsServer, EveryCompatNameIsExposed) {
  expect_exposed(kCompatNames);
}

// The list above against the shared document itself, so that a name added there is not missed.
TEST(MetricsServer, EveryNameOfTheSharedCompatDocIsExposed) {
  KESTREL_SKIP_IF_ABSENT(compat_doc_path(), "the shared vllm-compat.md");
  const std::vector<std::string> from_doc = names_from_compat_doc();
  EXPECT_GE(from_doc.size(), kCompatNames.size());
  expect_exposed(from_doc);
}

}  // namespace
}  // namespace kestrel::server
