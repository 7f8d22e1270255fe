// kestrel serve — the OpenAI-compatible server with vLLM's command line: parse the flags as
// `vllm serve` does, load the model and start the engine, then serve HTTP until SIGINT/SIGTERM,
// finishing in-flight requests within the grace period.
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "base/logging.h"
#include "base/task_pool.h"
#include "chat/deepseek_encoding.h"
#include "chat/template_source.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/serve_args.h"
#include "distributed/local_address.h"
#include "engine/engine_builder.h"
#include "model/loader.h"
#include "server/http/http_server.h"
#include "server/http/signals.h"
#include "server/metrics.h"
#include "server/openai_server.h"
#include "server/protocol/responses.h"
#include "server/responses_store.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

// Responses kept for GET /v1/responses/{id} and previous_response_id before the oldest finished
// one is dropped (vLLM keeps them all, and warns of the leak).
constexpr size_t kResponsesStoreCapacity = 10000;
// Threads that prepare requests and build answers (the HTTP server has two I/O threads).
constexpr int kRequestWorkers = 2;

int usage_error(const std::string& message) {
  size_t start = 0;
  while (start <= message.size()) {
    const size_t end = std::min(message.find('\n', start), message.size());
    std::fprintf(stderr, "kestrel serve: error: %s\n", message.substr(start, end - start).c_str());
    start = end + 1;
  }
  return 2;
}

server::SamplingValues generation_defaults(const GenerationDefaults& g) {
  server::SamplingValues v;
  v.temperature = g.temperature.value_or(v.temperature);
  v.top_p = g.top_p.value_or(v.top_p);
  v.top_k = g.top_k.value_or(v.top_k);
  v.min_p = g.min_p.value_or(v.min_p);
  v.repetition_penalty = g.repetition_penalty.value_or(v.repetition_penalty);
  return v;
}

// Where this instance's KV servers are reached: $VLLM_HOST_IP, else --host when it names one
// address, else this host's address on its default route ($GLOO_SOCKET_IFNAME's when set), and
// loopback on a host without one. A made-up engine id when the config has none, and a new
// incarnation for this start.
void prepare_kv_instance(ServeArgs& a) {
  KvInstance& kv = *a.engine.kv;
  if (!a.engine.host_ip.empty()) {
    kv.host = a.engine.host_ip;
  } else if (a.host != "0.0.0.0" && a.host != "::" && !a.host.empty()) {
    kv.host = a.host;
  } else if (auto routed = local_address_toward(
                 "192.0.2.1", AddressHints{a.engine.host_ip, a.engine.socket_ifnames});
             routed.ok()) {
    kv.host = *routed;  // a documentation address: only the route toward it is looked up
  } else {
    KLOG_WARN("KV transfer: no route off this host ({}); advertising 127.0.0.1",
              routed.error().message);
    kv.host = "127.0.0.1";
  }
  if (kv.transfer.engine_id.empty()) kv.transfer.engine_id = random_engine_id();
  std::random_device rd;
  kv.epoch = (uint64_t(rd()) << 32) | rd();
  KLOG_INFO("KV transfer: {} as {} (engine {}), KV servers advertised at {} from port {}",
            kv.transfer.connector, kv_role_name(kv.transfer.role), kv.transfer.engine_id, kv.host,
            kv.transfer.kv_port);
}

int serve(ServeArgs& a) {
  for (const auto& w : a.warnings) KLOG_WARN("{}", w);
  if (!a.notes.empty()) {
    std::string list;
    for (const auto& n : a.notes) list += (list.empty() ? "" : "; ") + n;
    KLOG_INFO("accepted with no effect on Kestrel: {}", list);
  }
  if (a.parallel.headless) {
    // Engines only: this node's data-parallel ranks, driven by the head's schedulers.
    KLOG_INFO("headless: data-parallel ranks {}..{} of {} for the head at {} (ports from {})",
              a.engine.data_parallel_first,
              a.engine.data_parallel_first + a.engine.local_data_parallel_ranks() - 1,
              a.engine.data_parallel_size, a.engine.data_parallel_address,
              a.engine.data_parallel_rpc_port + a.engine.data_parallel_first);
    return run_headless(a.engine);
  }
  if (a.engine.kv) prepare_kv_instance(a);
  auto started = build_engine(a.engine);
  if (!started) {
    KLOG_ERROR("{}", started.error().message);
    return 1;
  }
  Engine& e = **started;
  if (a.engine.quantization == "fp8" && !e.model().config.fp8.enabled) {
    KLOG_ERROR(
        "--quantization fp8: {} is not an FP8 block-quantized checkpoint (config.json has no fp8 "
        "quantization_config); quantizing bf16 weights to FP8 at load is not supported",
        a.engine.model);
    return 1;
  }

  server::ServingContext ctx;
  ctx.engine = &e.client();
  ctx.tokenizer = e.tokenizer();
  ctx.served_model_names = a.served_model_names;
  ctx.model_root = a.engine.model;
  ctx.max_model_len = e.client().max_model_len();
  ctx.vocab_size = e.model().config.vocab_size;
  ctx.sampling_defaults = generation_defaults(e.model().generation);
  ctx.max_logprobs = a.max_logprobs;
  ctx.api_key = a.api_key;
  ctx.reasoning_parser = a.reasoning_parser;
  ctx.tool_call_parser = a.tool_call_parser;
  ctx.enable_auto_tool_choice = a.enable_auto_tool_choice;
  if (ctx.tokenizer != nullptr) ctx.token_trie = structured::TokenTrie::build(*ctx.tokenizer);
  ctx.created = server::unix_time_now();
  ctx.deepseek_encoding = chat::deepseek_encoding(a.tokenizer_mode);
  if (ctx.deepseek_encoding) {
    // vLLM's DeepSeek tokenizer modes encode chat prompts natively and read no template.
    KLOG_INFO("chat prompts: DeepSeek's native encoder (--tokenizer-mode {})", a.tokenizer_mode);
    if (!a.chat_template.empty())
      KLOG_WARN("--chat-template is not used with --tokenizer-mode {}", a.tokenizer_mode);
  } else if (auto source = chat::find_chat_template(a.engine.model, a.chat_template); source.ok()) {
    auto tmpl = chat::ChatTemplate::parse(*source);
    if (!tmpl.ok()) {
      KLOG_ERROR("the chat template does not parse: {}", tmpl.error().message);
      return 1;
    }
    ctx.chat_template = std::move(*tmpl);
  } else {
    ctx.chat_template_missing = source.error().message;
    KLOG_WARN("no chat template ({}); /v1/chat/completions needs a request chat_template",
              source.error().message);
  }
  if (!a.default_chat_template_kwargs.empty())
    ctx.default_chat_template_kwargs = nlohmann::json::parse(a.default_chat_template_kwargs);
  std::vector<int> engines;
  for (const EngineStats& r : e.client().rank_stats()) engines.push_back(r.engine_index);
  server::ServerMetrics metrics(a.served_model_names.front(), ctx.max_model_len, engines);
  ctx.metrics = &metrics;
  // vLLM's switch for the Responses API store (off by default: stored responses take memory).
  std::optional<server::ResponsesStore> responses_store;
  if (const char* v = std::getenv("VLLM_ENABLE_RESPONSES_API_STORE");
      v != nullptr && (std::string_view(v) == "1" || std::string_view(v) == "true")) {
    responses_store.emplace(kResponsesStoreCapacity);
    ctx.responses_store = &*responses_store;
    KLOG_INFO("Responses API store on (at most {} responses kept)", kResponsesStoreCapacity);
  }

  // Declared after everything its tasks use (destroyed, and so drained, before them) and before
  // the HTTP servers, which post to it; the engine client is shut down before either goes.
  // --api-server-count N: N front ends, each with its own listener on the port (SO_REUSEPORT:
  // the kernel spreads connections over them), I/O threads and share of the request workers —
  // vLLM's N API server processes exist to spread Python's request handling over cores, which
  // threads do here, over one engine client and one metrics registry.
  const int fronts = a.api_server_count;
  TaskPool workers(kRequestWorkers * fronts);
  ctx.workers = &workers;
  std::vector<std::unique_ptr<server::HttpServer>> servers;
  server::SignalWaiter signals;
  uint16_t port = static_cast<uint16_t>(a.port);
  for (int i = 0; i < fronts; ++i) {
    server::HttpServerOptions options;
    options.host = a.host;
    options.port = port;
    options.reuse_port = fronts > 1;
    servers.push_back(std::make_unique<server::HttpServer>(options));
    server::add_openai_routes(*servers.back(), ctx);
    if (Status st = servers.back()->start(); !st.ok()) {
      KLOG_ERROR("cannot serve on {}:{}: {}", a.host, a.port, st.message());
      return 1;
    }
    port = servers.back()->port();  // port 0: the others share the one the first got
  }
  if (fronts > 1) KLOG_INFO("{} API servers share port {}", fronts, port);
  KLOG_INFO("Starting Kestrel API server on http://{}:{}", a.host, port);
  KLOG_INFO("Started server process [{}]", ::getpid());
  KLOG_INFO("Waiting for application startup.");
  // Set only now: every early return above leaves `metrics` before the engine thread stops.
  e.client().set_step_observer(
      [&metrics](int64_t tokens, int engine) { metrics.record_iteration_tokens(tokens, engine); });
  ctx.ready = true;
  KLOG_INFO("Application startup complete.");

  const int sig = signals.wait();
  KLOG_INFO("Shutting down (signal {}); finishing in-flight requests for up to {} s", sig,
            a.shutdown_grace_s);
  const auto drain_until =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_grace_s * 1000.0));
  auto left = [drain_until] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(std::chrono::steady_clock::duration::zero(),
                 drain_until - std::chrono::steady_clock::now()));
  };
  for (auto& http : servers) http->stop_accepting();
  for (auto& http : servers) http->shutdown(left());
  ctx.ready = false;
  // What is left of the grace period lets a rank that shares its experts step on until its peers
  // have drained too.
  if (!e.client().shutdown(left())) {
    // The failure was reported when it happened; the worker processes die with this one.
    KLOG_WARN(
        "an engine thread still waits in a collective of the failed group; exiting without it");
    KLOG_INFO("Application shutdown complete.");
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  e.client().set_step_observer(nullptr);
  KLOG_INFO("Application shutdown complete.");
  return 0;
}

int run_serve(int argc, char** argv) {
  ServeArgs a;
  CLI::App app{"Serve a model with the OpenAI-compatible API; takes vllm serve's flags.",
               "kestrel serve"};
  add_serve_args(app, a);
  auto normalized = normalize_vllm_argv(app, std::vector<std::string>(argv + 1, argv + argc));
  if (!normalized) return usage_error(normalized.error().message);
  std::vector<std::string> reversed(normalized->rbegin(), normalized->rend());  // CLI11's order
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    // argparse's wording, which scripts written against vllm serve may match on.
    std::string extras;
    for (const std::string& arg : normalized.value())
      if (!arg.empty() && arg[0] == '-' && std::string(e.what()).find(arg) != std::string::npos)
        extras += (extras.empty() ? "" : " ") + arg;
    return usage_error("unrecognized arguments: " +
                       (extras.empty() ? std::string(e.what()) : extras));
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }
  if (Status st = finalize_serve_args(a); !st.ok()) return usage_error(st.message());
  set_log_level(a.engine.log_level);
  return serve(a);
}

KESTREL_COMMAND("serve", "the OpenAI-compatible server (vllm serve's flags)", run_serve);

}  // namespace

}  // namespace kestrel::cli
