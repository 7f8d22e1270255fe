// POST /v1/responses, GET /v1/responses/{id}, POST /v1/responses/{id}/cancel: the Responses API
// over the chat template, as vLLM serves it for chat models.
#include "server/generation_requests.h"
#include "server/prompts.h"
#include "server/protocol/responses_request.h"
#include "server/responses_session.h"
#include "server/responses_store.h"
#include "server/route_support.h"
#include "server/structured_output.h"

namespace kestrel::server {

namespace {

using nlohmann::json;

ProtocolError response_not_found(const std::string& id) {
  return ProtocolError{404, "invalid_request_error", "Response with id '" + id + "' not found.",
                       "response_id"};
}

// The conversation to render: instructions, the previous response's turn (its input without
// system messages, then its answer), then the new input.
ParseResult<json> conversation(const ServingContext& ctx, const ResponsesRequest& req) {
  ResponsesConversation c;
  if (req.instructions && !req.instructions->empty())
    c.messages.push_back({{"role", "system"}, {"content", *req.instructions}});
  if (req.previous_response_id) {
    const std::optional<ResponsesStore::Stored> prev =
        ctx.responses_store ? ctx.responses_store->get(*req.previous_response_id) : std::nullopt;
    if (!prev) return response_not_found(*req.previous_response_id);
    for (const json& m : prev->messages)
      if (m.value("role", "") != "system") c.messages.push_back(m);
    append_responses_output(json(prev->response.at("output")), c);
  }
  for (const json& m : req.input.messages) c.messages.push_back(m);
  if (auto e = validate_chat_messages(c.messages)) {
    ProtocolError err = *e;
    err.param = "input";
    return err;
  }
  return c.messages;
}

json template_kwargs(const ResponsesRequest& req) {
  json kwargs = req.chat_template_kwargs.value_or(json::object());
  if (req.reasoning_effort) {
    if (!kwargs.contains("enable_thinking"))
      kwargs["enable_thinking"] = *req.reasoning_effort != "none";
    kwargs["reasoning_effort"] = *req.reasoning_effort;
  }
  return kwargs;
}

}  // namespace

void handle_responses_create(ServingContext& ctx, const HttpRequest& http,
                             std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  auto parsed = parse_responses_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  ResponsesRequest& req = parsed.value();
  auto model = resolve_model_name(ctx, req.model);
  if (!model) return reply_error(*r, model.error());
  const bool store_on = ctx.responses_store != nullptr;
  if (req.background && !store_on)
    return reply_error(
        *r, ProtocolError{400, "invalid_request_error",
                          "This engine does not support `store=True` and therefore does not "
                          "support the background mode. To enable these features, set the "
                          "environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when "
                          "launching the server.",
                          "background"});
  if (req.background && req.sampling.stream)
    return reply_error(*r, bad_request("background streaming is not supported by Kestrel; poll "
                                       "GET /v1/responses/{id} instead",
                                       "background"));
  if (ctx.tokenizer == nullptr)
    return reply_error(*r, bad_request("responses need a tokenizer, which this model lacks"));
  auto rules = check_sampling(ctx, req.sampling);
  if (!rules) return reply_error(*r, rules.error());
  auto messages = conversation(ctx, req);
  if (!messages) return reply_error(*r, messages.error());
  using Mode = ToolChoice::Mode;
  const Mode tool_mode = req.tools ? req.tool_choice.mode : Mode::kNone;
  const bool forced = tool_mode == Mode::kRequired || tool_mode == Mode::kNamed;
  if (forced && req.sampling.constraint)
    return reply_error(*r, bad_request("tool_choice \"required\" or a named function cannot be "
                                       "combined with text.format or structured_outputs",
                                       "tool_choice"));

  const json kwargs = template_kwargs(req);
  ChatPromptOptions po;
  po.messages = &messages.value();
  po.tools = req.tools ? &*req.tools : nullptr;
  po.add_generation_prompt = !req.input.continue_final;
  po.continue_final_message = req.input.continue_final;
  po.chat_template_kwargs = &kwargs;
  auto text = render_chat_prompt(ctx, po);
  if (!text) return reply_error(*r, text.error());
  auto ids = prompt_token_ids(ctx, text.value(), /*add_special_tokens=*/false);
  if (!ids) return reply_error(*r, ids.error());
  // truncation "auto" keeps the end of a prompt that would not fit.
  if (req.truncation_auto && !req.sampling.truncate_prompt_tokens)
    req.sampling.truncate_prompt_tokens = -1;
  auto fitted = fit_prompt(ctx, req.sampling, std::move(ids).value(), req.sampling.max_tokens);
  if (!fitted) return reply_error(*r, fitted.error());

  ResponsesSpec spec;
  spec.header.id = req.sampling.request_id.value_or(random_hex_id("resp_", 16));
  spec.header.created_at = unix_time_now();
  spec.header.model = model.value();
  spec.header.echo = req.echo;
  const SamplingValues v = resolve_sampling_values(req.sampling, ctx.sampling_defaults);
  spec.header.temperature = v.temperature;
  spec.header.top_p = v.top_p;
  spec.header.presence_penalty = v.presence_penalty;
  spec.header.frequency_penalty = v.frequency_penalty;
  spec.header.max_output_tokens = fitted.value().max_tokens;
  if (req.include_logprobs) spec.header.top_logprobs = req.sampling.logprobs.value_or(0);
  spec.request = engine_request(ctx, req.sampling, rules.value(), fitted.value().ids,
                                fitted.value().max_tokens);
  spec.request.id = spec.header.id;
  spec.stream = req.sampling.stream;
  spec.background = req.background;
  spec.store = req.store && store_on;
  spec.messages = messages.value();
  spec.include_reasoning = req.include_reasoning;
  spec.parallel_tool_calls = req.parallel_tool_calls;
  spec.logprobs = req.include_logprobs;
  spec.max_tokens_param = req.sampling.max_tokens.value_or(0);
  if (!ctx.reasoning_parser.empty())
    spec.reasoning = chat::make_reasoning_parser(ctx.reasoning_parser, text.value());
  if (req.sampling.constraint) {
    auto grammar = constraint_grammar(ctx, *req.sampling.constraint);
    if (!grammar) return reply_error(*r, grammar.error());
    spec.request.engine.constraint = grammar_constraint(grammar.value(), ctx.token_trie);
  }
  if (forced) {
    auto grammar = forced_tools_grammar(ctx, req.tool_choice, *req.tools, req.parallel_tool_calls);
    if (!grammar) return reply_error(*r, grammar.error());
    spec.request.engine.constraint = grammar_constraint(grammar.value(), ctx.token_trie);
    spec.forced_tools = req.tool_choice;
  } else if (tool_mode == Mode::kAuto && ctx.enable_auto_tool_choice &&
             !ctx.tool_call_parser.empty()) {
    // Without a tool-call parser "auto" leaves the text as it is (vLLM does not refuse here).
    std::vector<chat::ToolSpec> specs;
    for (const json& t : *req.tools)
      specs.push_back({t["function"]["name"].get<std::string>(), t["function"]["parameters"]});
    spec.tool_parser = chat::make_tool_parser(ctx.tool_call_parser, specs);
    spec.request.output.skip_special_tokens = false;
  }
  log_unread(req.unread, spec.header.id);
  start_response(ctx, std::move(r), std::move(spec));
}

void handle_responses_retrieve(ServingContext& ctx, const HttpRequest& http,
                               std::shared_ptr<Responder> r) {
  const std::string id(http.path_param("id").value_or(""));
  if (http.query.find("stream=true") != std::string::npos)
    return reply_error(*r, bad_request("stream=true replays background streams, which Kestrel "
                                       "does not support; GET without stream",
                                       "stream"));
  const auto stored = ctx.responses_store ? ctx.responses_store->get(id) : std::nullopt;
  if (!stored) return reply_error(*r, response_not_found(id));
  r->respond(200, "application/json", stored->response.dump());
}

void handle_responses_cancel(ServingContext& ctx, const HttpRequest& http,
                             std::shared_ptr<Responder> r) {
  const std::string id(http.path_param("id").value_or(""));
  if (ctx.responses_store == nullptr) return reply_error(*r, response_not_found(id));
  nlohmann::ordered_json object;
  switch (ctx.responses_store->cancel(id, object)) {
    case ResponsesStore::CancelResult::kNotFound:
      return reply_error(*r, response_not_found(id));
    case ResponsesStore::CancelResult::kNotRunning:
      return reply_error(*r, ProtocolError{400, "invalid_request_error",
                                           "Cannot cancel a synchronous response.", "response_id"});
    case ResponsesStore::CancelResult::kCancelled:
      return void(r->respond(200, "application/json", object.dump()));
  }
}

}  // namespace kestrel::server
