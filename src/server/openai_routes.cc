// The route handlers. Each parses its body at the edge (server/protocol), turns it into engine
// requests and hands them to a GenerationSession; nothing here touches engine state directly.
#include <algorithm>
#include <functional>

#include "base/logging.h"

#include "server/api_key.h"
#include "server/openai_server.h"
#include "server/prompts.h"
#include "server/protocol/responses.h"
#include "server/protocol/tokenize_request.h"
#include "server/route_support.h"

namespace kestrel::server {

namespace {

constexpr std::string_view kJson = "application/json";

constexpr const char* kVersion = "0.1.0";

}  // namespace

void reply_error(Responder& r, const ProtocolError& e) {
  r.respond(e.code, kJson, error_body(e).dump());
}

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

namespace {

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

void handle_models(ServingContext& ctx, const HttpRequest&, std::shared_ptr<Responder> r) {
  std::vector<nlohmann::ordered_json> cards;
  for (const auto& name : ctx.served_model_names)
    cards.push_back(model_card(name, ctx.created, ctx.model_root, ctx.max_model_len));
  r->respond(200, kJson, model_list(cards).dump());
}

// GET /v1/models/{id}: the OpenAI API's retrieve (vLLM lacks it); 404 for a name not served.
void handle_model(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r) {
  const std::string id(http.path_param("id").value_or(""));
  const auto& names = ctx.served_model_names;
  if (std::find(names.begin(), names.end(), id) == names.end())
    return reply_error(*r, model_not_found(id));
  r->respond(200, kJson, model_card(id, ctx.created, ctx.model_root, ctx.max_model_len).dump());
}

// Wraps a handler with the checks every route shares: readiness and, under /v1, the API key.
Handler guarded(ServingContext& ctx, std::string path,
                std::function<void(const HttpRequest&, std::shared_ptr<Responder>)> h) {
  const bool needs_key = path.rfind("/v1", 0) == 0;
  return [&ctx, needs_key, h = std::move(h)](const HttpRequest& req, std::shared_ptr<Responder> r) {
    if (needs_key && ctx.api_key) {
      if (!bearer_matches(req.header("Authorization"), *ctx.api_key))
        return void(r->respond(401, kJson, api_key_rejection_body().dump()));
    }
    if (!ctx.ready.load())
      return reply_error(
          *r, ProtocolError{503, "ServiceUnavailableError",
                            "The server is starting up or shutting down.", std::nullopt});
    // Parsing, templating, tokenizing and grammar compilation are the handler's work: they run
    // on the request workers, never on the I/O threads that every connection shares.
    run_on_workers(ctx.workers, [h, req, r] {
      try {
        h(req, r);
      } catch (const std::exception& e) {
        KLOG_ERROR("handler for {} {} threw: {}", req.method, req.path, e.what());
        if (!r->respond(500, kJson, error_body(internal_error("Internal server error")).dump()))
          r->abort();
      }
    });
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
    const std::string text = ctx.metrics ? ctx.metrics->render(ctx.engine->rank_stats()) : "";
    r->respond(200, "text/plain; version=0.0.4; charset=utf-8", text);
  });
  using RouteHandler = void (*)(ServingContext&, const HttpRequest&, std::shared_ptr<Responder>);
  auto add = [&](const char* method, const std::string& path, RouteHandler handler) {
    server.route(
        method, path,
        guarded(ctx, path, [&ctx, handler](const HttpRequest& q, std::shared_ptr<Responder> r) {
          handler(ctx, q, std::move(r));
        }));
  };
  add("GET", "/v1/models", handle_models);
  add("GET", "/v1/models/{id*}", handle_model);
  add("POST", "/v1/completions", handle_completions);
  add("POST", "/v1/chat/completions", handle_chat);
  add("POST", "/v1/responses", handle_responses_create);
  add("GET", "/v1/responses/{id}", handle_responses_retrieve);
  add("POST", "/v1/responses/{id}/cancel", handle_responses_cancel);
  add("POST", "/tokenize", handle_tokenize);
  add("POST", "/detokenize", handle_detokenize);
}

}  // namespace kestrel::server
