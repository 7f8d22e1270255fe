// cli/serve_args.h — the flags of `kestrel serve`, which accepts the command lines of
// `vllm serve` from the deployment guides. docs/compatibility.md says what Kestrel does with each
// flag; finalize_serve_args() applies it.
//
// Use: add_serve_args(app, args); parse normalize_vllm_argv(app, argv) with CLI11 (a CLI11
// error is a usage error, exit status 2); then finalize_serve_args(args).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/engine_args.h"

namespace kestrel::cli {

// Data-parallel topology flags (--tensor-parallel-size and --data-parallel-size are engine
// flags). Every rank runs in this server, or this server is one rank behind an external load
// balancer (--data-parallel-rank); ranks on other nodes (--headless, a start rank) are refused.
struct ParallelArgs {
  std::optional<int> data_parallel_size_local;
  std::optional<int> data_parallel_start_rank;
  std::optional<int> data_parallel_rank;
  std::optional<std::string> data_parallel_address;
  std::optional<int> data_parallel_rpc_port;
  bool headless = false;
  // vLLM's explicit load-balancing modes: hybrid (each node's server balances its own ranks),
  // external (each server one rank, --data-parallel-rank).
  bool hybrid_lb = false;
  bool external_lb = false;
};

struct ServeArgs {
  EngineConfig engine;  // engine.model: the positional MODEL, or --model
  std::string host = "0.0.0.0";
  int port = 8000;
  std::optional<std::string> api_key;           // --api-key, else env VLLM_API_KEY, KESTREL_API_KEY
  std::vector<std::string> served_model_names;  // --served-model-name N [N ...]; default: MODEL
  std::string chat_template;                    // --chat-template (file path or inline template)
  std::string default_chat_template_kwargs;     // --default-chat-template-kwargs JSON object
  std::string tool_call_parser, reasoning_parser;
  bool enable_auto_tool_choice = false;
  int max_logprobs = 20;
  bool disable_log_requests = false;
  bool enable_log_requests = false;
  std::string uvicorn_log_level = "info";
  int api_server_count = 1;
  double shutdown_grace_s = 30;  // --shutdown-timeout: Kestrel's own (vLLM has no such flag)

  ParallelArgs parallel;
  std::string model_option;  // --model as given (finalize moves it to engine.model)
  std::string tokenizer_mode = "auto";
  bool trust_remote_code = false;
  std::string safetensors_load_strategy = "lazy";
  bool disable_hybrid_kv_cache_manager = false;
  bool async_scheduling = false;
  bool enforce_eager = false;
  bool swa_bounded_replay = true;  // no effect; --no-swa-bounded-replay only warns
  std::string allowed_local_media_path;
  std::optional<double> mm_processor_cache_gb;
  std::string mm_encoder_tp_mode;
  // JSON flags, as given (empty: absent); finalize_serve_args() validates them (and
  // engine.speculative_config).
  std::string kv_transfer_config;
  std::string compilation_config;
  std::string additional_config;
  std::string model_loader_extra_config;
  std::string engram_config;
  std::string limit_mm_per_prompt;

  // Filled by finalize_serve_args() for the start-up log: "accepted, no effect" settings that
  // were given ("<flag> (<reason>)", one info line in all), and warnings (one line each).
  std::vector<std::string> notes;
  std::vector<std::string> warnings;
};

// Registers every serve flag on `app`, the shared engine flags (add_engine_args) included, plus
// the positional MODEL and --model. A repeated scalar flag keeps its last value, as argparse.
void add_serve_args(CLI::App& app, ServeArgs& args);

// Rewrites vLLM-style arguments (everything after `serve`, in order) into what CLI11 parses:
// `--flag_name` → `--flag-name`, and a unique prefix of a long flag registered on `app` → that
// flag (argparse allow_abbrev: an exact name wins; an ambiguous prefix is an error naming the
// candidates). `--flag=value` keeps its value; values and everything after `--` are untouched.
// CLI11's App::parse(std::vector) wants the result reversed.
Expected<std::vector<std::string>> normalize_vllm_argv(const CLI::App& app,
                                                       const std::vector<std::string>& argv);

// Applies docs/compatibility.md to parsed flags: checks MODEL (and moves --model to
// engine.model), fills api_key from the environment and served_model_names from MODEL,
// validates the JSON flags, and fills notes and warnings. An error lists every refusal, one per
// line, in the texts of the doc's §15; print each line as `kestrel serve: error: <line>` and
// exit with status 2.
Status finalize_serve_args(ServeArgs& args);

}  // namespace kestrel::cli
