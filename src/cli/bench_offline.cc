// kestrel bench latency | throughput — vLLM's offline benchmarks (`vllm bench latency`,
// `vllm bench throughput`): the same flags, the same printed lines and JSON keys, on the
// in-process engine with every engine flag of serve.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "bench/offline.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "engine/engine_builder.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

struct CommonArgs {
  EngineConfig engine;
  int64_t input_len = 0;
  int64_t output_len = 0;
  std::string output_json;
  bool disable_detokenize = false;
  int n = 1;
};

void add_common(CLI::App& app, CommonArgs& a) {
  add_engine_args(app, a.engine);
  app.add_option("--input-len", a.input_len, "prompt tokens per request")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--output-len", a.output_len, "output tokens per request")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--output-json", a.output_json, "write the results as JSON to this file");
  app.add_flag("--disable-detokenize", a.disable_detokenize,
               "skip detokenization (token ids only)");
  app.add_option("--n", a.n, "sequences per prompt (only 1 is supported)")->check(CLI::Range(1, 1));
}

Expected<std::unique_ptr<Engine>> start(CommonArgs& a) {
  KTRY(read_engine_environment(a.engine));
  return build_engine(a.engine);
}

bench::RandomPromptSpec prompt_spec(const Engine& e, const CommonArgs& a) {
  bench::RandomPromptSpec s;
  s.input_len = a.input_len;
  s.output_len = a.output_len;
  s.seed = a.engine.seed;
  s.vocab_size = static_cast<int32_t>(e.model().config.vocab_size);
  if (const Tokenizer* tok = e.tokenizer()) {
    s.vocab_size = std::min(s.vocab_size, tok->vocab_size());
    for (int32_t id = 0; id < s.vocab_size; ++id)
      if (tok->is_special(id)) s.excluded_ids.push_back(id);
  }
  return s;
}

bool write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return true;
  std::ofstream f(path);
  f << j.dump(4) << "\n";
  if (!f) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

int run_latency(int argc, char** argv) {
  CommonArgs a;
  a.input_len = 32;
  a.output_len = 128;
  int64_t batch_size = 8;
  int warmup = 10, iters = 30;
  CLI::App app{"Latency of generating one batch, as vllm bench latency.", "kestrel bench latency"};
  add_common(app, a);
  app.add_option("--batch-size", batch_size, "requests per batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--num-iters-warmup", warmup, "untimed batches first")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--num-iters", iters, "timed batches")->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);

  auto engine = start(a);
  if (!engine.ok()) return fail(engine.error());
  bench::RandomPromptSpec spec = prompt_spec(**engine, a);
  spec.num_prompts = batch_size;
  auto prompts = bench::random_prompts(spec);
  if (!prompts.ok()) return fail(prompts.error());
  bench::BenchSampling sampling;
  sampling.detokenize = !a.disable_detokenize && (*engine)->tokenizer() != nullptr;
  sampling.seed = a.engine.seed;

  std::printf("Warming up...\n");
  std::fflush(stdout);  // progress goes to stderr; keep the two in order
  for (int i = 0; i < warmup; ++i) {
    auto r =
        bench::run_batch((*engine)->client(), *prompts, sampling, "warmup" + std::to_string(i));
    if (!r.ok()) return fail(r.error());
  }
  std::vector<double> latencies;
  for (int i = 0; i < iters; ++i) {
    auto r = bench::run_batch((*engine)->client(), *prompts, sampling, "iter" + std::to_string(i));
    if (!r.ok()) return fail(r.error());
    latencies.push_back(r->elapsed_s);
    std::fprintf(stderr, "\rProfiling iterations: %d/%d", i + 1, iters);
  }
  std::fprintf(stderr, "\n");
  double sum = 0.0;
  for (double l : latencies) sum += l;
  const double avg = sum / double(latencies.size());
  std::printf("Avg latency: %.6f seconds\n", avg);
  nlohmann::ordered_json percentiles;
  for (int p : {10, 25, 50, 75, 90, 99}) {
    const double v = bench::percentile(latencies, p);
    std::printf("%d%% percentile latency: %.6f seconds\n", p, v);
    percentiles[std::to_string(p)] = v;
  }
  nlohmann::ordered_json j;
  j["avg_latency"] = avg;
  j["latencies"] = latencies;
  j["percentiles"] = percentiles;
  return write_json(a.output_json, j) ? 0 : 1;
}

int run_throughput(int argc, char** argv) {
  CommonArgs a;
  a.input_len = 128;
  a.output_len = 128;
  int64_t num_prompts = 1000, prefix_len = 0;
  double range_ratio = 0.0;
  std::string dataset_name = "random";
  CLI::App app{"Offline throughput on random prompts, as vllm bench throughput.",
               "kestrel bench throughput"};
  add_common(app, a);
  app.add_option("--num-prompts", num_prompts, "requests, all submitted at once")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--prefix-len,--random-prefix-len", prefix_len,
                 "random tokens shared by every prompt (before --input-len own tokens)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--random-range-ratio", range_ratio, "lengths uniform in [L(1-r), L(1+r)]")
      ->check(CLI::Range(0.0, 0.999));
  app.add_option("--dataset-name", dataset_name, "random (the only offline dataset so far)")
      ->check(CLI::IsMember({"random"}));
  CLI11_PARSE(app, argc, argv);

  auto engine = start(a);
  if (!engine.ok()) return fail(engine.error());
  bench::RandomPromptSpec spec = prompt_spec(**engine, a);
  spec.num_prompts = num_prompts;
  spec.prefix_len = prefix_len;
  spec.range_ratio = range_ratio;
  auto prompts = bench::random_prompts(spec);
  if (!prompts.ok()) return fail(prompts.error());
  bench::BenchSampling sampling;
  sampling.detokenize = !a.disable_detokenize && (*engine)->tokenizer() != nullptr;
  sampling.seed = a.engine.seed;

  const EngineStats before = (*engine)->client().stats();
  auto r = bench::run_batch((*engine)->client(), *prompts, sampling, "req");
  if (!r.ok()) return fail(r.error());
  const EngineStats after = (*engine)->client().stats();
  const double t = r->elapsed_s;
  const int64_t total = r->prompt_tokens + r->output_tokens;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              double(r->num_requests) / t, double(total) / t, double(r->output_tokens) / t);
  std::printf("Total num prompt tokens:  %lld\n", (long long)r->prompt_tokens);
  std::printf("Total num output tokens:  %lld\n", (long long)r->output_tokens);
  const int64_t computed =
      after.counters.prompt_tokens_computed - before.counters.prompt_tokens_computed;
  std::printf(
      "Prefix cache: %lld of %lld prompt tokens cached (%.1f%%), %lld prompt tokens "
      "computed\n",
      (long long)r->cached_tokens, (long long)r->prompt_tokens,
      100.0 * double(r->cached_tokens) / double(std::max<int64_t>(r->prompt_tokens, 1)),
      (long long)computed);
  std::printf("Engine: %lld steps, %lld preemptions\n",
              (long long)(after.counters.steps - before.counters.steps),
              (long long)(after.num_preemptions - before.num_preemptions));
  nlohmann::ordered_json j;
  j["elapsed_time"] = t;
  j["num_requests"] = r->num_requests;
  j["total_num_tokens"] = total;
  j["requests_per_second"] = double(r->num_requests) / t;
  j["tokens_per_second"] = double(total) / t;
  j["output_tokens_per_second"] = double(r->output_tokens) / t;
  j["total_prompt_tokens"] = r->prompt_tokens;
  j["total_output_tokens"] = r->output_tokens;
  j["cached_prompt_tokens"] = r->cached_tokens;
  j["prompt_tokens_computed"] = computed;
  return write_json(a.output_json, j) ? 0 : 1;
}

KESTREL_COMMAND("bench latency", "time one batch end to end (vllm bench latency)", run_latency);
KESTREL_COMMAND("bench throughput", "offline tokens/s on random prompts (vllm bench throughput)",
                run_throughput);

}  // namespace

}  // namespace kestrel::cli
