// kestrel generate — one prompt through the engine (the same EngineClient that serves), printing
// the continuation as it streams and a timing line.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "engine/engine_builder.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

struct Args {
  EngineConfig engine;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  int max_tokens = 64;
  int min_tokens = 0;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool print_ids = false;
  int logprobs = -1;
};

Expected<std::vector<int32_t>> parse_ids(const std::string& s, int64_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      return make_error("--prompt-ids: '{}' is not an integer", item);
    }
    if (item.find_first_not_of(" \t", used) != std::string::npos)
      return make_error("--prompt-ids: '{}' is not an integer", item);
    if (v < 0 || v >= vocab)
      return make_error("--prompt-ids: token id {} is outside the vocabulary [0, {})", v, vocab);
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) return make_error("--prompt-ids: no token ids given");
  return ids;
}

SamplingParams sampling_params(const Args& a, const GenerationDefaults& g) {
  SamplingParams p;
  p.temperature = a.temperature.value_or(float(g.temperature.value_or(1.0)));
  p.top_p = a.top_p.value_or(float(g.top_p.value_or(1.0)));
  p.top_k = a.top_k.value_or(int(g.top_k.value_or(0)));
  p.min_p = a.min_p.value_or(float(g.min_p.value_or(0.0)));
  p.repetition_penalty = a.repetition_penalty.value_or(float(g.repetition_penalty.value_or(1.0)));
  p.presence_penalty = a.presence_penalty;
  p.frequency_penalty = a.frequency_penalty;
  p.logprobs = a.logprobs;
  return p;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

int generate(Args& a) {
  if (Status st = read_engine_environment(a.engine); !st.ok()) return fail(st.message());
  auto started = build_engine(a.engine);
  if (!started) return fail(started.error().message);
  Engine& e = **started;
  const ModelConfig& cfg = e.model().config;
  const Tokenizer* tokenizer = e.tokenizer();

  std::vector<int32_t> prompt;
  if (a.prompt_ids) {
    auto ids = parse_ids(*a.prompt_ids, cfg.vocab_size);
    if (!ids) return fail(ids.error().message);
    prompt = std::move(*ids);
  } else {
    if (!tokenizer)
      return fail(
          "--prompt needs a tokenizer and this model has none Kestrel can read: pass "
          "--prompt-ids or --tokenizer");
    prompt = tokenizer->encode(*a.prompt, /*add_special_tokens=*/true);
    if (prompt.empty()) return fail("the prompt encodes to no tokens");
  }
  const int64_t max_len = e.client().max_model_len();
  if (!fits_context(int64_t(prompt.size()), a.max_tokens, max_len))
    return fail(fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context length ({})",
                            prompt.size(), a.max_tokens, max_len));

  GenerateRequest req;
  req.id = "generate";
  req.engine.prompt_token_ids = prompt;
  req.engine.sampling = sampling_params(a, e.model().generation);
  req.engine.max_tokens = a.max_tokens;
  req.engine.min_tokens = a.min_tokens;
  req.engine.stop_token_ids = a.stop_token_ids;
  req.engine.ignore_eos = a.ignore_eos;
  req.engine.seed = a.engine.seed;
  req.output.stop = a.stop;
  req.output.detokenize = !a.print_ids && tokenizer != nullptr;

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto stream = e.client().add_request(std::move(req));
  if (!stream) return fail(stream.error().message);
  std::optional<Clock::time_point> first;
  int64_t printed = 0;
  RequestOutput out;
  do {
    out = (*stream)->next();
    if (!first && !out.token_ids.empty()) first = Clock::now();
    if (a.print_ids) {
      for (int32_t t : out.token_ids) std::printf("%s%d", printed++ ? " " : "", t);
    } else {
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    }
    std::fflush(stdout);
    for (const TokenLogprobs& lp : out.logprobs) {
      std::fprintf(stderr, "token %d logprob %.6f top:", lp.token, lp.logprob);
      for (const auto& t : lp.top) std::fprintf(stderr, " %d:%.6f", t.token, t.logprob);
      std::fprintf(stderr, "\n");
    }
  } while (!out.finished());
  const auto t2 = Clock::now();
  std::printf("\n");
  if (out.finish_reason == FinishReason::kError) return fail(out.error);
  const auto t1 = first.value_or(t2);
  const double pp_s = std::chrono::duration<double>(t1 - t0).count();
  const double tg_s = std::chrono::duration<double>(t2 - t1).count();
  const int64_t decode_steps = std::max<int64_t>(out.num_output_tokens - 1, 0);
  const double tg_tps = decode_steps > 0 ? double(decode_steps) / tg_s : 0.0;
  std::fprintf(stderr,
               "prompt: %zu tokens, %.1f tok/s | decode: %lld tokens, %.1f tok/s, %.2f GB/s of "
               "weights | finish: %s\n",
               prompt.size(), double(prompt.size()) / pp_s, (long long)decode_steps, tg_tps,
               // Under TP, rank 0's share times the ranks: the whole model's bytes, or a little
               // more when the split is uneven (rank 0 takes the larger part).
               tg_tps * double(e.model().model->weight_bytes()) *
                   double(a.engine.tensor_parallel_size) / 1e9,
               finish_reason_name(*out.finish_reason));
  const SpecDecodeStats spec = e.client().stats().counters.spec_decode;
  if (!spec.empty())
    std::fprintf(stderr,
                 "speculative: %lld drafts, %lld of %lld draft tokens accepted (%.1f%%), mean "
                 "acceptance length %.2f\n",
                 (long long)spec.num_drafts, (long long)spec.num_accepted_tokens,
                 (long long)spec.num_draft_tokens,
                 100.0 * double(spec.num_accepted_tokens) / double(spec.num_draft_tokens),
                 1.0 + double(spec.num_accepted_tokens) / double(spec.num_drafts));
  return 0;
}

}  // namespace

namespace {

int run_generate(int argc, char** argv) {
  Args a;
  a.engine.log_level = "warning";  // the continuation is the output; start-up lines are noise
  CLI::App app{"Run one prompt through a model and print the continuation.", "kestrel generate"};
  add_engine_args(app, a.engine);
  auto* p = app.add_option("--prompt,-p", a.prompt, "prompt text");
  auto* pi = app.add_option("--prompt-ids", a.prompt_ids, "prompt as comma-separated token ids");
  p->excludes(pi);
  app.add_option("--max-tokens,-n", a.max_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--temperature", a.temperature, "0 = greedy (default: generation_config or 1.0)")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-p", a.top_p)->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--top-k", a.top_k)->check(CLI::Range(-1, 1 << 30));
  app.add_option("--min-p", a.min_p)->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repetition-penalty", a.repetition_penalty)->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--presence-penalty", a.presence_penalty)->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--frequency-penalty", a.frequency_penalty)->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--logprobs", a.logprobs, "print the chosen token's logprob and the top N")
      ->check(CLI::Range(0, 20));
  app.add_option("--min-tokens", a.min_tokens, "stop tokens are ignored until this many outputs")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--stop", a.stop, "stop string (repeatable); not included in the output");
  app.add_option("--stop-token-ids", a.stop_token_ids, "token ids that end generation");
  app.add_flag("--ignore-eos", a.ignore_eos);
  app.add_flag("--print-ids", a.print_ids, "print token ids instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!a.prompt && !a.prompt_ids) {
    std::fprintf(stderr, "error: give --prompt or --prompt-ids\n");
    return 2;
  }
  return generate(a);
}

KESTREL_COMMAND("generate", "run a prompt through a model and print the continuation",
                run_generate);

}  // namespace

}  // namespace kestrel::cli
