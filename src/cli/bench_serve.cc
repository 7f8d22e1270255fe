// kestrel bench serve — the online serving benchmark, compatible with `vllm bench serve`: the same
// flags (long-flag prefixes as argparse allows them), random or ShareGPT prompts built with the
// target tokenizer, Poisson/gamma arrivals, a concurrency cap, one async client thread, and
// vLLM's printed result block and --save-result JSON. Works against any OpenAI-compatible server.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <sys/resource.h>

#include "bench/serve_arrivals.h"
#include "bench/serve_client.h"
#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "bench/sync_http.h"
#include "bench/token_codec.h"
#include "cli/commands.h"
#include "cli/serve_args.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

struct Args {
  std::string backend = "openai";
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint;
  std::string model;
  std::string tokenizer;
  std::string dataset_name = "random";
  std::string dataset_path;
  int64_t num_prompts = 1000;
  int64_t random_input_len = 1024;
  int64_t random_output_len = 128;
  double random_range_ratio = 0.0;
  int64_t random_prefix_len = 0;
  std::optional<int64_t> sharegpt_output_len;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  bool ignore_eos = false;
  double temperature = 0.0;
  std::string extra_body;
  uint64_t seed = 0;
  bool save_result = false;
  std::string result_dir;
  std::string result_filename;
  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  std::vector<std::string> goodput;
  bool disable_tqdm = false;
  std::string label;
  std::string api_key;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// The tokenizer the datasets use: --tokenizer when given; else the server's own (/tokenize),
// else the model name read as a local path.
struct TokenizerChoice {
  std::unique_ptr<Tokenizer> local;  // owned here when the codec reads a local tokenizer
  std::unique_ptr<bench::TokenCodec> codec;
  std::string id;  // what the result JSON names as tokenizer_id
};

Expected<TokenizerChoice> choose_tokenizer(const Args& a) {
  TokenizerChoice c;
  std::string remote_error;
  if (a.tokenizer.empty()) {
    auto remote =
        bench::remote_token_codec({a.host, static_cast<uint16_t>(a.port), a.api_key, a.model});
    if (remote.ok()) {
      c.codec = std::move(remote).value();
      c.id = "server:/tokenize";
      return c;
    }
    remote_error = remote.error().message;
  }
  const std::string path = a.tokenizer.empty() ? a.model : a.tokenizer;
  auto tok = load_tokenizer(path);
  if (!tok.ok()) {
    if (!a.tokenizer.empty())
      return make_error("--tokenizer: {} (give a local tokenizer.json directory or .gguf file)",
                        tok.error().message);
    return make_error(
        "no tokenizer: the server's /tokenize failed ({}) and the model name '{}' is not a local "
        "tokenizer ({}); pass --tokenizer",
        remote_error, path, tok.error().message);
  }
  c.local = std::move(tok).value();
  c.codec = bench::local_token_codec(*c.local);
  c.id = path;
  return c;
}

// Each stream in flight holds a socket: lift the soft descriptor limit to the hard one, and warn
// when even that is too low for the requests that may run at once.
void raise_open_file_limit(int64_t max_in_flight) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  constexpr int64_t kSpareDescriptors = 64;
  if (lim.rlim_cur != RLIM_INFINITY &&
      static_cast<int64_t>(lim.rlim_cur) < max_in_flight + kSpareDescriptors)
    std::fprintf(stderr,
                 "warning: the open-file limit (%lld) is below the %lld requests that may be in "
                 "flight at once; connections beyond it will fail (raise `ulimit -n` or set "
                 "--max-concurrency)\n",
                 static_cast<long long>(lim.rlim_cur), static_cast<long long>(max_in_flight));
}

Status parse_base_url(Args& a) {
  if (a.base_url.empty()) return {};
  std::string rest = a.base_url;
  const size_t scheme = rest.find("://");
  if (scheme != std::string::npos) {
    if (rest.substr(0, scheme) != "http")
      return make_error("--base-url {}: only http:// is supported", a.base_url);
    rest = rest.substr(scheme + 3);
  }
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const size_t colon = hostport.rfind(':');
  a.host = hostport.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      a.port = std::stoi(hostport.substr(colon + 1));
    } catch (...) {
      return make_error("--base-url {}: bad port", a.base_url);
    }
  } else {
    a.port = 80;
  }
  return {};
}

int fail(const std::string& message) {
  std::fprintf(stderr, "kestrel bench serve: error: %s\n", message.c_str());
  return 1;
}

std::string now_stamp() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

int bench_serve(Args& a) {
  if (Status st = parse_base_url(a); !st.ok()) return fail(st.message());
  const bool chat = a.backend == "openai-chat";
  if (a.endpoint.empty()) a.endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  if (a.model.empty()) {
    bench::SyncHttpClient http(a.host, static_cast<uint16_t>(a.port), a.api_key);
    auto models = http.get("/v1/models");
    if (!models.ok()) return fail(models.error().message);
    if (models->status != 200)
      return fail("GET /v1/models answered " + std::to_string(models->status) + ": " +
                  models->body);
    const auto j = nlohmann::json::parse(models->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || j["data"].empty())
      return fail("/v1/models lists no model; pass --model");
    a.model = j["data"][0].value("id", "");
  }
  auto tok = choose_tokenizer(a);
  if (!tok.ok()) return fail(tok.error().message);

  double rate = std::numeric_limits<double>::infinity();
  if (a.request_rate != "inf") {
    try {
      rate = std::stod(a.request_rate);
    } catch (...) {
      return fail("--request-rate must be a number or inf");
    }
  }
  if (Status st = bench::check_arrival_params(rate, a.burstiness); !st.ok())
    return fail(st.message());

  Expected<std::vector<bench::SampleRequest>> samples = make_error("no dataset");
  if (a.dataset_name == "random") {
    bench::RandomDatasetSpec spec;
    spec.num_prompts = a.num_prompts;
    spec.input_len = a.random_input_len;
    spec.output_len = a.random_output_len;
    spec.prefix_len = a.random_prefix_len;
    spec.range_ratio = a.random_range_ratio;
    spec.seed = a.seed;
    samples = bench::random_dataset(*tok->codec, spec);
  } else {
    if (a.dataset_path.empty()) return fail("--dataset-name sharegpt needs --dataset-path");
    samples = bench::sharegpt_dataset(*tok->codec, a.dataset_path, a.num_prompts, a.seed,
                                      a.sharegpt_output_len);
  }
  if (!samples.ok()) return fail(samples.error().message);

  nlohmann::json extra = nlohmann::json::object();
  if (!a.extra_body.empty()) {
    extra = nlohmann::json::parse(a.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object())
      return fail("--extra-body must be a JSON object");
  }
  auto arrivals = bench::arrival_times(int64_t(samples->size()), rate, a.burstiness, a.seed);
  std::vector<bench::ServeRequest> requests;
  const size_t total = samples->size();
  // The random dataset is used for lengths only; ignore_eos makes outputs as long as asked, as
  // vLLM does for it.
  const bool ignore_eos = a.ignore_eos || a.dataset_name == "random";
  for (size_t i = 0; i < samples->size(); ++i) {
    const bench::SampleRequest& s = (*samples)[i];
    nlohmann::json body = {
        {"model", a.model}, {"temperature", a.temperature}, {"max_tokens", s.expected_output_len}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", s.prompt}}};
      body["max_completion_tokens"] = s.expected_output_len;
    } else {
      body["prompt"] = s.prompt;
    }
    if (ignore_eos) body["ignore_eos"] = true;
    for (const auto& [k, v] : extra.items()) body[k] = v;
    bench::ServeRequest r;
    r.endpoint = a.endpoint;
    r.body = std::move(body);
    r.prompt_len = s.prompt_len;
    r.send_at_s = arrivals[i];
    r.request_id = "bench-" + std::to_string(i);
    requests.push_back(std::move(r));
  }

  raise_open_file_limit(a.max_concurrency > 0 ? std::min<int64_t>(a.max_concurrency, int64_t(total))
                                              : int64_t(total));
  bench::ClientOptions options;
  options.host = a.host;
  options.port = static_cast<uint16_t>(a.port);
  options.api_key = a.api_key;
  std::fprintf(stderr, "Traffic request rate: %s, burstiness: %.2f, max concurrency: %s\n",
               a.request_rate.c_str(), a.burstiness,
               a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "None");
  const auto t0 = std::chrono::steady_clock::now();
  auto traces = bench::run_requests(options, requests, a.max_concurrency, [&](size_t done) {
    if (a.disable_tqdm) return;
    std::fprintf(stderr, "\r%zu/%zu requests", done, total);
    if (done == total) std::fprintf(stderr, "\n");
  });
  const double duration =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  bench::BenchmarkConfig config;
  config.percentile_metrics = split(a.percentile_metrics, ',');
  config.metric_percentiles.clear();
  for (const auto& p : split(a.metric_percentiles, ',')) {
    try {
      config.metric_percentiles.push_back(std::stod(p));
    } catch (...) {
      return fail("--metric-percentiles: '" + p + "' is not a number");
    }
  }
  if (!a.goodput.empty()) {
    auto slo = bench::parse_goodput(a.goodput);
    if (!slo.ok()) return fail(slo.error().message);
    config.goodput_slo_ms = *slo;
  }
  if (a.max_concurrency > 0) config.max_concurrency = a.max_concurrency;
  config.request_rate = rate;
  config.burstiness = a.burstiness;
  config.date = now_stamp();
  config.backend = a.backend;
  if (!a.label.empty()) config.label = a.label;
  config.model_id = a.model;
  config.tokenizer_id = tok->id;
  config.num_prompts = int64_t(total);
  const bench::BenchmarkResult result = bench::calculate_metrics(traces, duration, config);
  std::printf("%s", bench::format_result_block(result, config).c_str());
  std::fflush(stdout);

  if (a.save_result) {
    std::string name = a.result_filename;
    if (name.empty())
      name = a.backend + "-" + std::to_string(rate) + "qps-" +
             std::filesystem::path(a.model).filename().string() + "-" + config.date + ".json";
    std::filesystem::path path = a.result_dir.empty() ? std::filesystem::path(name)
                                                      : std::filesystem::path(a.result_dir) / name;
    if (!a.result_dir.empty()) std::filesystem::create_directories(a.result_dir);
    std::ofstream f(path);
    f << bench::result_json(result, config, /*include_per_request=*/true).dump(2) << "\n";
    if (!f) return fail("cannot write " + path.string());
  }
  return result.completed > 0 ? 0 : 1;
}

int run_bench_serve(int argc, char** argv) {
  Args a;
  CLI::App app{"Benchmark an OpenAI-compatible server, as vllm bench serve.",
               "kestrel bench serve"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--backend", a.backend, "openai (completions) | openai-chat | vllm")
      ->check(CLI::IsMember({"openai", "openai-chat", "vllm"}));
  app.add_option("--base-url", a.base_url, "server URL, e.g. http://127.0.0.1:8000");
  app.add_option("--host", a.host);
  app.add_option("--port", a.port);
  app.add_option("--endpoint", a.endpoint,
                 "default /v1/completions (/v1/chat/completions for chat)");
  app.add_option("--model", a.model, "default: the first model of /v1/models");
  app.add_option("--tokenizer", a.tokenizer,
                 "local tokenizer.json directory or .gguf file (default: the server's /tokenize, "
                 "else the model name as a path)");
  app.add_option("--dataset-name", a.dataset_name)->check(CLI::IsMember({"random", "sharegpt"}));
  app.add_option("--dataset-path", a.dataset_path, "ShareGPT-format JSON file");
  app.add_option("--num-prompts", a.num_prompts)->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--random-input-len", a.random_input_len)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--random-output-len", a.random_output_len)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--random-range-ratio", a.random_range_ratio)->check(CLI::Range(0.0, 0.999));
  app.add_option("--random-prefix-len", a.random_prefix_len)
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--sharegpt-output-len", a.sharegpt_output_len);
  app.add_option("--request-rate", a.request_rate, "requests/s (Poisson), or inf");
  app.add_option("--burstiness", a.burstiness, "gamma shape of the gaps; 1 = Poisson");
  app.add_option("--max-concurrency", a.max_concurrency, "requests in flight at most (0 = no cap)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--ignore-eos", a.ignore_eos);
  app.add_option("--temperature", a.temperature);
  app.add_option("--extra-body", a.extra_body, "JSON object merged into every request body");
  app.add_option("--seed", a.seed);
  app.add_flag("--save-result", a.save_result);
  app.add_option("--result-dir", a.result_dir);
  app.add_option("--result-filename", a.result_filename);
  app.add_option("--percentile-metrics", a.percentile_metrics, "comma list of ttft,tpot,itl,e2el");
  app.add_option("--metric-percentiles", a.metric_percentiles, "comma list, e.g. 50,90,99");
  app.add_option("--goodput", a.goodput, "SLOs as KEY:MS pairs (ttft, tpot, e2el)")->expected(1, 3);
  app.add_flag("--disable-tqdm", a.disable_tqdm);
  app.add_option("--label", a.label);
  app.add_option("--api-key", a.api_key);
  auto normalized = normalize_vllm_argv(app, std::vector<std::string>(argv + 1, argv + argc));
  if (!normalized) return fail(normalized.error().message);
  std::vector<std::string> reversed(normalized->rbegin(), normalized->rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (a.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) a.api_key = k;
  return bench_serve(a);
}

KESTREL_COMMAND("bench serve",
                "online serving benchmark against an OpenAI server (vllm bench serve)",
                run_bench_serve);

}  // namespace

}  // namespace kestrel::cli
