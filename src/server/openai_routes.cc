// The route handlers. Each parses its body at the edge (server/protocol), turns it into engine
// requests and hands them to a GenerationSession; nothing here touches engine state directly.
#include <atomic>
#include <random>

#include "base/logging.h"
#include "server/forced_tool_calls.h"
#include "server/generation_session.h"
#include "server/openai_server.h"
#include "server/prompts.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"
#include "server/protocol/responses.h"
#include "server/protocol/tokenize_request.h"
#include "server/structured_output.h"

namespace kestrel::server {

namespace {

constexpr std::string_view kJson = "application/json";
constexpr const char* kVersion = "0.1.0";

void reply_error(Responder& r, const ProtocolError& e) {
  r.respond(e.code, kJson, error_body(e).dump());
}

// Parses a JSON body; malformed JSON is a 400 as vLLM gives it.
std::optional<nlohmann::json> parse_body(const HttpRequest& req, Responder& r) {
  auto j = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    reply_error(r, bad_request("The request body is not valid JSON."));
    return std::nullopt;
  }
  if (!j.is_object()) {
    reply_error(r, bad_request("The request body must be a JSON object."));
    return std::nullopt;
  }
  return j;
}

void log_ignored(const std::vector<std::string>& fields, const std::string& id) {
  if (fields.empty()) return;
  std::string list;
  for (const auto& f : fields) list += (list.empty() ? "" : ", ") + f;
  KLOG_WARN("request {}: ignoring unsupported fields: {}", id, list);
}

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return counter.fetch_add(0x9E3779B97F4A7C15ull);
}

// Fields Kestrel cannot honour yet are refused rather than silently ignored, since ignoring them
// would change the output.
std::optional<ProtocolError> unsupported(const SamplingFields& s) {
  if (s.response_format && s.response_format->type == "structural_tag")
    return bad_request(
        "response_format 'structural_tag' is not supported yet (json_object and "
        "json_schema are)",
        "response_format");
  return std::nullopt;
}

// response_format json_object / json_schema: every choice gets its own matcher of the request's
// grammar. The error is the 400 to answer.
std::optional<ProtocolError> constrain_choices(const ServingContext& ctx, const SamplingFields& s,
                                               SessionSpec& spec) {
  if (!s.response_format || !s.response_format->constrains_output()) return std::nullopt;
  if (!ctx.token_trie)
    return bad_request("response_format needs a tokenizer, which this model lacks",
                       "response_format");
  auto grammar = response_format_grammar(*s.response_format);
  if (!grammar.ok()) return bad_request(grammar.error().message, "response_format");
  for (SessionChoice& c : spec.choices)
    c.request.engine.constraint = grammar_constraint(grammar.value(), ctx.token_trie);
  return std::nullopt;
}

// The engine request for one choice, from the shared sampling fields.
GenerateRequest engine_request(const ServingContext& ctx, const SamplingFields& s,
                               std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerateRequest g;
  const SamplingValues v = resolve_sampling_values(s, ctx.sampling_defaults);
  g.engine.prompt_token_ids = std::move(prompt);
  g.engine.sampling.temperature = float(v.temperature);
  g.engine.sampling.top_p = float(v.top_p);
  g.engine.sampling.top_k = int(v.top_k);
  g.engine.sampling.min_p = float(v.min_p);
  g.engine.sampling.presence_penalty = float(v.presence_penalty);
  g.engine.sampling.frequency_penalty = float(v.frequency_penalty);
  g.engine.sampling.repetition_penalty = float(v.repetition_penalty);
  g.engine.sampling.logprobs = s.logprobs ? int(*s.logprobs) : -1;
  g.engine.max_tokens = max_tokens;
  g.engine.min_tokens = std::min(s.min_tokens, max_tokens);
  g.engine.stop_token_ids = s.stop_token_ids;
  g.engine.ignore_eos = s.ignore_eos;
  g.engine.seed = s.seed ? uint64_t(*s.seed) : fresh_seed();
  g.output.stop = s.stop;
  g.output.include_stop_str_in_output = s.include_stop_str_in_output;
  g.output.skip_special_tokens = s.skip_special_tokens;
  g.output.detokenize = ctx.tokenizer != nullptr;
  return g;
}

std::optional<ProtocolError> check_common(const ServingContext& ctx, const SamplingFields& s) {
  if (auto e = unsupported(s)) return e;
  if (s.logprobs && *s.logprobs > ctx.max_logprobs)
    return bad_request(
        "Requested logprobs of " + std::to_string(*s.logprobs) +
            ", which is greater than max allowed: " + std::to_string(ctx.max_logprobs),
        "logprobs");
  if (s.prompt_logprobs && *s.prompt_logprobs > ctx.max_logprobs)
    return bad_request(
        "Requested prompt logprobs of " + std::to_string(*s.prompt_logprobs) +
            ", which is greater than max allowed: " + std::to_string(ctx.max_logprobs),
        "prompt_logprobs");
  if (!s.stop.empty() && ctx.tokenizer == nullptr)
    return bad_request("stop strings need a tokenizer, which this model lacks", "stop");
  return std::nullopt;
}

// Rejects prompts that leave no room for max_tokens within the context, as vLLM words it.
std::optional<ProtocolError> check_length(const ServingContext& ctx, int64_t prompt_len,
                                          int64_t max_tokens) {
  if (prompt_len + max_tokens > ctx.max_model_len || prompt_len >= ctx.max_model_len)
    return prompt_too_long(prompt_len, max_tokens, ctx.max_model_len);
  return std::nullopt;
}

// The response-level settings both generation endpoints take from the shared fields.
SessionSpec session_spec(StreamKind kind, const std::string& model, const SamplingFields& s) {
  SessionSpec spec;
  spec.kind = kind;
  spec.id =
      s.request_id.value_or(make_request_id(kind == StreamKind::kCompletion ? "cmpl" : "chatcmpl"));
  spec.created = unix_time_now();
  spec.model = model;
  spec.stream = s.stream;
  spec.include_usage = s.stream_options && s.stream_options->include_usage;
  spec.continuous_usage = s.stream_options && s.stream_options->continuous_usage_stats;
  spec.logprobs = s.logprobs.has_value();
  spec.max_tokens_param = s.max_tokens.value_or(0);
  spec.n = s.n;
  return spec;
}

void handle_completions(ServingContext& ctx, const HttpRequest& http,
                        std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  auto parsed = parse_completion_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  CompletionRequest& req = parsed.value();
  auto model = resolve_model_name(ctx, req.model);
  if (!model) return reply_error(*r, model.error());
  if (auto e = check_common(ctx, req.sampling)) return reply_error(*r, *e);
  const std::optional<int64_t> requested_max = req.sampling.max_tokens;
  // max_tokens 0 (echo only) runs the prompt for one token that is not reported.
  const bool drop_output = requested_max == 0;
  const bool echo_logprobs = req.echo && req.sampling.logprobs.has_value();
  const int prompt_logprobs = int(req.sampling.prompt_logprobs.value_or(-1));
  const int engine_prompt_logprobs =
      std::max(echo_logprobs ? int(*req.sampling.logprobs) : -1, prompt_logprobs);

  SessionSpec spec = session_spec(StreamKind::kCompletion, model.value(), req.sampling);
  log_ignored(req.ignored_fields, spec.id);
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    auto ids = prompt_token_ids(ctx, req.prompts[p], req.add_special_tokens);
    if (!ids) return reply_error(*r, ids.error());
    const int64_t max_tokens = drop_output
                                   ? 1
                                   : requested_max.value_or(std::max<int64_t>(
                                         ctx.max_model_len - int64_t(ids.value().size()), 1));
    if (auto e = check_length(ctx, int64_t(ids.value().size()), max_tokens))
      return reply_error(*r, *e);
    std::string echo;
    if (req.echo) {
      if (const auto* text = std::get_if<std::string>(&req.prompts[p])) {
        echo = *text;
      } else if (ctx.tokenizer) {
        echo = ctx.tokenizer->decode(ids.value(), /*skip_special_tokens=*/false);
      }
    }
    for (int64_t k = 0; k < req.sampling.n; ++k) {
      SessionChoice c;
      c.request = engine_request(ctx, req.sampling, ids.value(), max_tokens);
      c.request.engine.id = spec.id + "-" + std::to_string(spec.choices.size());
      if (req.sampling.seed) c.request.engine.seed += uint64_t(k);
      c.request.engine.prompt_logprobs = engine_prompt_logprobs;
      c.echo = echo;
      c.prompt_index = int64_t(p);
      c.prompt_ids = ids.value();
      c.echo_logprobs = echo_logprobs;
      c.prompt_logprobs = prompt_logprobs;
      c.drop_output = drop_output;
      spec.choices.push_back(std::move(c));
    }
  }
  if (auto e = constrain_choices(ctx, req.sampling, spec)) return reply_error(*r, *e);
  start_generation(ctx, std::move(r), std::move(spec));
}

void handle_chat(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  auto parsed = parse_chat_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  ChatCompletionRequest& req = parsed.value();
  auto model = resolve_model_name(ctx, req.model);
  if (!model) return reply_error(*r, model.error());
  if (auto e = check_common(ctx, req.sampling)) return reply_error(*r, *e);
  if (req.sampling.prompt_logprobs)
    return reply_error(*r, bad_request("prompt_logprobs is not supported for chat yet; use "
                                       "/v1/completions",
                                       "prompt_logprobs"));
  const ToolChoice::Mode tool_mode = req.tools ? req.tool_choice.mode : ToolChoice::Mode::kNone;
  if (tool_mode == ToolChoice::Mode::kAuto &&
      (!ctx.enable_auto_tool_choice || ctx.tool_call_parser.empty()))
    return reply_error(*r, bad_request("\"auto\" tool choice requires --enable-auto-tool-choice "
                                       "and --tool-call-parser to be set",
                                       "tool_choice"));
  const bool forced_tools =
      tool_mode == ToolChoice::Mode::kRequired || tool_mode == ToolChoice::Mode::kNamed;
  if (forced_tools && req.sampling.response_format &&
      req.sampling.response_format->constrains_output())
    return reply_error(*r, bad_request("tool_choice \"required\" or a named function cannot be "
                                       "combined with a response_format",
                                       "tool_choice"));
  if (ctx.tokenizer == nullptr)
    return reply_error(*r, bad_request("chat needs a tokenizer, which this model lacks"));

  ChatPromptOptions po;
  po.messages = &req.messages;
  po.tools = req.tools ? &*req.tools : nullptr;
  po.documents = req.documents ? &*req.documents : nullptr;
  po.add_generation_prompt = req.add_generation_prompt;
  po.continue_final_message = req.continue_final_message;
  po.chat_template = req.chat_template;
  po.chat_template_kwargs = req.chat_template_kwargs ? &*req.chat_template_kwargs : nullptr;
  auto text = render_chat_prompt(ctx, po);
  if (!text) return reply_error(*r, text.error());
  auto ids = prompt_token_ids(ctx, text.value(), req.add_special_tokens);
  if (!ids) return reply_error(*r, ids.error());
  const int64_t prompt_len = int64_t(ids.value().size());
  const int64_t max_tokens =
      req.sampling.max_tokens.value_or(std::max<int64_t>(ctx.max_model_len - prompt_len, 1));
  if (auto e = check_length(ctx, prompt_len, max_tokens)) return reply_error(*r, *e);

  SessionSpec spec = session_spec(StreamKind::kChat, model.value(), req.sampling);
  log_ignored(req.ignored_fields, spec.id);
  for (int64_t k = 0; k < req.sampling.n; ++k) {
    SessionChoice c;
    c.request = engine_request(ctx, req.sampling, ids.value(), max_tokens);
    c.request.engine.id = spec.id + "-" + std::to_string(k);
    if (req.sampling.seed) c.request.engine.seed += uint64_t(k);
    if (!ctx.reasoning_parser.empty())
      c.reasoning = chat::make_reasoning_parser(ctx.reasoning_parser, text.value());
    spec.choices.push_back(std::move(c));
  }
  if (auto e = constrain_choices(ctx, req.sampling, spec)) return reply_error(*r, *e);
  if (forced_tools) {
    if (!ctx.token_trie)
      return reply_error(*r, bad_request("tool calls need a tokenizer", "tools"));
    auto grammar = structured::compile_json_schema(
        forced_tool_schema(req.tool_choice, *req.tools, req.parallel_tool_calls));
    if (!grammar.ok())
      return reply_error(
          *r, bad_request("the tools' parameters cannot be enforced: " + grammar.error().message,
                          "tools"));
    for (SessionChoice& c : spec.choices) {
      c.request.engine.constraint = grammar_constraint(grammar.value(), ctx.token_trie);
      c.forced_tools = req.tool_choice;
    }
  } else if (tool_mode == ToolChoice::Mode::kAuto) {
    std::vector<chat::ToolSpec> specs;
    for (const nlohmann::json& t : *req.tools) {
      const nlohmann::json& fn = t.at("function");
      specs.push_back(
          {fn.at("name").get<std::string>(), fn.value("parameters", nlohmann::json::object())});
    }
    for (SessionChoice& c : spec.choices) {
      c.tool_parser = chat::make_tool_parser(ctx.tool_call_parser, specs);
      // Tool-call markers may be special tokens (Mistral's [TOOL_CALLS], DeepSeek's).
      c.request.output.skip_special_tokens = false;
    }
  }
  start_generation(ctx, std::move(r), std::move(spec));
}

void handle_tokenize(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  auto parsed = parse_tokenize_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  const TokenizeRequest& req = parsed.value();
  auto model = resolve_model_name(ctx, req.model);
  if (!model) return reply_error(*r, model.error());
  if (ctx.tokenizer == nullptr) return reply_error(*r, bad_request("this model has no tokenizer"));
  std::string text = req.prompt;
  if (req.is_chat) {
    ChatPromptOptions po;
    po.messages = &req.messages;
    po.tools = req.tools ? &*req.tools : nullptr;
    po.add_generation_prompt = req.add_generation_prompt;
    po.continue_final_message = req.continue_final_message;
    po.chat_template = req.chat_template;
    po.chat_template_kwargs = req.chat_template_kwargs ? &*req.chat_template_kwargs : nullptr;
    auto rendered = render_chat_prompt(ctx, po);
    if (!rendered) return reply_error(*r, rendered.error());
    text = rendered.value();
  }
  const std::vector<int32_t> ids = ctx.tokenizer->encode(text, req.add_special_tokens);
  std::optional<std::vector<std::string>> strs;
  if (req.return_token_strs) {
    strs.emplace();
    for (int32_t id : ids) strs->push_back(ctx.tokenizer->token_bytes(id));
  }
  r->respond(200, kJson, tokenize_response(ids, ctx.max_model_len, strs).dump());
}

void handle_detokenize(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  auto parsed = parse_detokenize_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  auto model = resolve_model_name(ctx, parsed.value().model);
  if (!model) return reply_error(*r, model.error());
  if (ctx.tokenizer == nullptr) return reply_error(*r, bad_request("this model has no tokenizer"));
  for (int32_t id : parsed.value().tokens)
    if (id < 0 || id >= ctx.vocab_size)
      return reply_error(
          *r, bad_request("Token id " + std::to_string(id) + " is out of vocabulary", "tokens"));
  r->respond(200, kJson,
             detokenize_response(ctx.tokenizer->decode(parsed.value().tokens, false)).dump());
}

void handle_models(ServingContext& ctx, std::shared_ptr<Responder> r) {
  std::vector<nlohmann::ordered_json> cards;
  for (const auto& name : ctx.served_model_names)
    cards.push_back(model_card(name, ctx.created, ctx.model_root, ctx.max_model_len));
  r->respond(200, kJson, model_list(cards).dump());
}

// Wraps a handler with the checks every route shares: readiness and, under /v1, the API key.
Handler guarded(ServingContext& ctx, std::string path,
                std::function<void(const HttpRequest&, std::shared_ptr<Responder>)> h) {
  const bool needs_key = path.rfind("/v1", 0) == 0;
  return [&ctx, needs_key, h = std::move(h)](const HttpRequest& req, std::shared_ptr<Responder> r) {
    if (needs_key && ctx.api_key) {
      const auto auth = req.header("Authorization");
      if (!auth || *auth != "Bearer " + *ctx.api_key)
        return void(r->respond(401, kJson, api_key_rejection_body().dump()));
    }
    if (!ctx.ready.load())
      return reply_error(
          *r, ProtocolError{503, "ServiceUnavailableError",
                            "The server is starting up or shutting down.", std::nullopt});
    h(req, std::move(r));
  };
}

}  // namespace

void add_openai_routes(HttpServer& server, ServingContext& ctx) {
  server.route("GET", "/health", [&ctx](const HttpRequest&, std::shared_ptr<Responder> r) {
    const bool ok = ctx.ready.load() && !ctx.engine->stats().dead;
    r->respond(ok ? 200 : 503, "text/plain", "");
  });
  server.route("GET", "/version", [](const HttpRequest&, std::shared_ptr<Responder> r) {
    r->respond(200, kJson, nlohmann::json{{"version", kVersion}}.dump());
  });
  server.route("GET", "/metrics", [&ctx](const HttpRequest&, std::shared_ptr<Responder> r) {
    const std::string text = ctx.metrics ? ctx.metrics->render(ctx.engine->stats()) : "";
    r->respond(200, "text/plain; version=0.0.4; charset=utf-8", text);
  });
  server.route("GET", "/v1/models",
               guarded(ctx, "/v1/models", [&ctx](const HttpRequest&, std::shared_ptr<Responder> r) {
                 handle_models(ctx, std::move(r));
               }));
  server.route(
      "POST", "/v1/completions",
      guarded(ctx, "/v1/completions", [&ctx](const HttpRequest& q, std::shared_ptr<Responder> r) {
        handle_completions(ctx, q, std::move(r));
      }));
  server.route("POST", "/v1/chat/completions",
               guarded(ctx, "/v1/chat/completions",
                       [&ctx](const HttpRequest& q, std::shared_ptr<Responder> r) {
                         handle_chat(ctx, q, std::move(r));
                       }));
  server.route(
      "POST", "/tokenize",
      guarded(ctx, "/tokenize", [&ctx](const HttpRequest& q, std::shared_ptr<Responder> r) {
        handle_tokenize(ctx, q, std::move(r));
      }));
  server.route(
      "POST", "/detokenize",
      guarded(ctx, "/detokenize", [&ctx](const HttpRequest& q, std::shared_ptr<Responder> r) {
        handle_detokenize(ctx, q, std::move(r));
      }));
}

}  // namespace kestrel::server
