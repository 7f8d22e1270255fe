#include "bench/offline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <unordered_set>

namespace kestrel::bench {

namespace {

int64_t draw_length(int64_t target, double ratio, std::mt19937_64& rng) {
  if (ratio <= 0.0) return target;
  const auto lo = static_cast<int64_t>(std::floor(double(target) * (1.0 - ratio)));
  const auto hi = static_cast<int64_t>(std::ceil(double(target) * (1.0 + ratio)));
  return std::uniform_int_distribution<int64_t>(std::max<int64_t>(lo, 1), hi)(rng);
}

}  // namespace

Expected<std::vector<BenchPrompt>> random_prompts(const RandomPromptSpec& s) {
  if (s.num_prompts < 1) return make_error("--num-prompts must be at least 1");
  if (s.input_len < 1) return make_error("--input-len must be at least 1");
  if (s.output_len < 1) return make_error("--output-len must be at least 1");
  if (s.prefix_len < 0) return make_error("--prefix-len must not be negative");
  if (s.range_ratio < 0.0 || s.range_ratio >= 1.0)
    return make_error("--random-range-ratio must be in [0, 1)");
  const std::unordered_set<int32_t> excluded(s.excluded_ids.begin(), s.excluded_ids.end());
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < s.vocab_size; ++id)
    if (!excluded.count(id)) allowed.push_back(id);
  if (allowed.empty()) return make_error("no token ids to draw random prompts from");

  std::mt19937_64 rng(s.seed);
  std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
  std::vector<int32_t> prefix(static_cast<size_t>(s.prefix_len));
  for (int32_t& t : prefix) t = allowed[pick(rng)];
  std::vector<BenchPrompt> out(static_cast<size_t>(s.num_prompts));
  for (BenchPrompt& p : out) {
    p.token_ids = prefix;
    const int64_t len = draw_length(s.input_len, s.range_ratio, rng);
    for (int64_t i = 0; i < len; ++i) p.token_ids.push_back(allowed[pick(rng)]);
    p.output_len = draw_length(s.output_len, s.range_ratio, rng);
  }
  return out;
}

Expected<BatchResult> run_batch(EngineClient& client, const std::vector<BenchPrompt>& prompts,
                                const BenchSampling& sampling, const std::string& tag) {
  using Clock = std::chrono::steady_clock;
  BatchResult result;
  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.reserve(prompts.size());
  const auto start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.id = tag + "-" + std::to_string(i);
    r.engine.prompt_token_ids = prompts[i].token_ids;
    r.engine.max_tokens = prompts[i].output_len;
    r.engine.ignore_eos = true;
    r.engine.sampling.temperature = sampling.temperature;
    r.engine.sampling.top_p = sampling.top_p;
    r.engine.seed = sampling.seed + i;
    r.output.detokenize = sampling.detokenize;
    auto stream = client.add_request(std::move(r));
    if (!stream.ok()) {
      for (const auto& s : streams) client.abort(s->id());
      return stream.error();
    }
    streams.push_back(std::move(*stream));
  }
  for (const auto& s : streams) {
    RequestOutput out = s->next();
    while (!out.finished()) out = s->next();
    if (out.finish_reason == FinishReason::kError || out.finish_reason == FinishReason::kAbort)
      return make_error("request {} ended with {}{}", s->id(),
                        finish_reason_name(*out.finish_reason),
                        out.error.empty() ? "" : ": " + out.error);
    result.prompt_tokens += out.num_prompt_tokens;
    result.output_tokens += out.num_output_tokens;
    result.cached_tokens += out.num_cached_tokens;
  }
  result.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  result.num_requests = static_cast<int64_t>(prompts.size());
  return result;
}

double percentile(std::vector<double> values, double pct) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = pct / 100.0 * double(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - double(lo));
}

}  // namespace kestrel::bench
