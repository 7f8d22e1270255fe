// kestrel generate — one prompt through one model on the CPU, printing the continuation and
// a timing line. A single sequence in a contiguous run of KV blocks; the engine issue replaces
// this loop with the scheduler.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "backend/cpu/sampling.h"
#include "base/logging.h"
#include "cli/commands.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

constexpr int kBlockSize = 16;

struct Args {
  std::string model;
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";
  std::string quant_compute = "int8";
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  int max_tokens = 64;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool print_ids = false;
  int logprobs = -1;
  int threads = 0;
  std::string log_level = "warning";
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

cpu::SamplingParams sampling_params(const Args& a, const GenerationDefaults& g) {
  cpu::SamplingParams p;
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

int generate(const Args& a) {
  LoadOptions lo;
  lo.model = a.model;
  lo.load_format = a.load_format;
  lo.dtype = a.dtype;
  lo.kv_cache_dtype = a.kv_cache_dtype;
  lo.quant_compute = a.quant_compute;
  lo.threads = a.threads;
  lo.seed = a.seed;
  auto loaded = load_model(lo);
  if (!loaded) {
    std::fprintf(stderr, "error: %s\n", loaded.error().message.c_str());
    return 1;
  }
  LoadedModel& lm = **loaded;
  const ModelConfig& cfg = lm.config;

  std::unique_ptr<Tokenizer> tok;
  if (lm.gguf && a.load_format != "dummy") {
    auto t = load_gguf_tokenizer(*lm.gguf);
    if (t) {
      tok = std::move(*t);
    } else if (a.prompt) {
      std::fprintf(stderr, "error: %s\n", t.error().message.c_str());
      return 1;
    }
  }

  std::vector<int32_t> prompt;
  if (a.prompt_ids) {
    auto ids = parse_ids(*a.prompt_ids, cfg.vocab_size);
    if (!ids) {
      std::fprintf(stderr, "error: %s\n", ids.error().message.c_str());
      return 1;
    }
    prompt = std::move(*ids);
  } else {
    if (!tok) {
      std::fprintf(stderr,
                   "error: --prompt needs a tokenizer; this model has none Kestrel can read yet "
                   "(tokenizer.json support is issue 3): pass --prompt-ids\n");
      return 1;
    }
    prompt = tok->encode(*a.prompt, /*add_special_tokens=*/true);
    if (prompt.empty()) {
      std::fprintf(stderr, "error: the prompt encodes to no tokens\n");
      return 1;
    }
  }
  const int64_t total = int64_t(prompt.size()) + a.max_tokens;
  if (total > cfg.max_position_embeddings) {
    std::fprintf(stderr,
                 "error: prompt (%zu tokens) + max_tokens (%d) exceeds the model's context length "
                 "(%lld)\n",
                 prompt.size(), a.max_tokens, (long long)cfg.max_position_embeddings);
    return 1;
  }

  const int64_t num_blocks = (total + kBlockSize - 1) / kBlockSize;
  KVCacheStorage kv = lm.model->make_kv_cache(num_blocks, kBlockSize);
  std::vector<int32_t> block_table(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) block_table[i] = int32_t(i);

  std::vector<float> logits(cfg.vocab_size);
  std::vector<int32_t> output;
  cpu::Rng rng(a.seed);
  const cpu::SamplingParams sp = sampling_params(a, lm.generation);
  std::optional<IncrementalDetokenizer> detok;
  if (tok) detok.emplace(*tok, /*skip_special_tokens=*/true, prompt);
  auto print_text = [](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };

  BatchBuilder builder(kBlockSize);
  auto step = [&](std::span<const int32_t> ids, int32_t start_pos) {
    builder.clear();
    builder.add(ids, start_pos, block_table, BatchBuilder::Logits::kLast);
    lm.model->forward(builder.batch(), kv, logits.data());
  };

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  step(prompt, 0);
  const auto t1 = Clock::now();
  int decode_steps = 0;
  std::string finish = "length";
  for (int i = 0; i < a.max_tokens; ++i) {
    if (i > 0) {
      step(std::span<const int32_t>(&output.back(), 1), int32_t(prompt.size() + output.size() - 1));
      ++decode_steps;
    }
    const cpu::SampleResult r = cpu::sample(logits, sp, prompt, output, rng);
    output.push_back(r.token);
    if (a.print_ids) {
      std::printf("%s%d", i ? " " : "", r.token);
      std::fflush(stdout);
    } else if (detok) {
      print_text(detok->push(r.token));
    }
    if (sp.logprobs >= 0) {
      std::fprintf(stderr, "token %d logprob %.6f top:", r.token, r.logprob);
      for (const auto& t : r.top) std::fprintf(stderr, " %d:%.6f", t.token, t.logprob);
      std::fprintf(stderr, "\n");
    }
    const auto& eos = lm.generation.eos_token_ids;
    if (!a.ignore_eos && std::find(eos.begin(), eos.end(), r.token) != eos.end()) {
      finish = "stop";
      break;
    }
  }
  const auto t2 = Clock::now();
  if (detok) print_text(detok->finish());
  std::printf("\n");
  const double pp_s = std::chrono::duration<double>(t1 - t0).count();
  const double tg_s = std::chrono::duration<double>(t2 - t1).count();
  const double tg_tps = decode_steps > 0 ? decode_steps / tg_s : 0.0;
  std::fprintf(stderr,
               "prompt: %zu tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s, %.2f GB/s of "
               "weights | finish: %s\n",
               prompt.size(), prompt.size() / pp_s, decode_steps, tg_tps,
               tg_tps * double(lm.model->weight_bytes()) / 1e9, finish.c_str());
  return 0;
}

}  // namespace

namespace {

int run_generate(int argc, char** argv) {
  Args a;
  CLI::App app{"Run one prompt through a model and print the continuation.", "kestrel generate"};
  app.add_option("--model,-m", a.model, "model directory (config.json + safetensors) or .gguf file")
      ->required();
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
  app.add_option("--seed", a.seed);
  app.add_option("--logprobs", a.logprobs, "print the chosen token's logprob and the top N")
      ->check(CLI::Range(0, 20));
  app.add_flag("--ignore-eos", a.ignore_eos);
  app.add_flag("--print-ids", a.print_ids, "print token ids instead of text");
  app.add_option("--threads,-t", a.threads, "compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--load-format", a.load_format, "auto | safetensors | gguf | dummy");
  app.add_option("--dtype", a.dtype,
                 "activation (and dummy weight) dtype: auto | float32 | bfloat16 | float16");
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype, "auto | fp32 | bf16 | fp16");
  app.add_option("--quant-compute", a.quant_compute,
                 "quantized weights: int8 (activations quantized per block, as llama.cpp) | f32 "
                 "(blocks dequantized against f32 activations)");
  app.add_option("--log-level", a.log_level, "debug | info | warning | error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!a.prompt && !a.prompt_ids) {
    std::fprintf(stderr, "error: give --prompt or --prompt-ids\n");
    return 2;
  }
  set_log_level(a.log_level);
  return generate(a);
}

KESTREL_COMMAND("generate", "run a prompt through a model and print the continuation",
                run_generate);

}  // namespace

}  // namespace kestrel::cli
