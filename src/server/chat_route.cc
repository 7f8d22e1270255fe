// POST /v1/chat/completions: the conversation rendered by the chat template, n choices, tools
// (forced by a grammar or parsed out of the text) and reasoning.
#include "server/generation_requests.h"
#include "server/kv_lease_guard.h"
#include "server/prompts.h"
#include "server/protocol/chat_request.h"
#include "server/route_support.h"
#include "server/structured_output.h"

namespace kestrel::server {

namespace {

// chat_template_kwargs with vLLM's additions: reasoning_effort, and enable_thinking derived from
// it unless the request set enable_thinking itself.
nlohmann::json template_kwargs(const ChatCompletionRequest& req) {
  nlohmann::json kwargs = req.chat_template_kwargs.value_or(nlohmann::json::object());
  if (req.reasoning_effort) {
    if (!kwargs.contains("enable_thinking"))
      kwargs["enable_thinking"] = *req.reasoning_effort != "none";
    kwargs["reasoning_effort"] = *req.reasoning_effort;
  }
  return kwargs;
}

// vLLM's chat echo: the last message's content when it is the assistant's (a continuation).
std::string echo_text(const ChatCompletionRequest& req) {
  if (!req.echo) return "";
  const nlohmann::json& last = req.messages.back();
  if (last.value("role", "") != "assistant") return "";
  const auto content = last.find("content");
  if (content == last.end() || content->is_null()) return "";
  if (content->is_string()) return content->get<std::string>();
  std::string text;
  for (const nlohmann::json& part : *content) {
    if (!text.empty()) text += "\n";
    text += part.is_string() ? part.get<std::string>() : part.value("text", "");
  }
  return text;
}

// tool_choice "required" or a named function: a grammar forces the call's JSON.
std::optional<ProtocolError> force_tool_calls(const ServingContext& ctx,
                                              const ChatCompletionRequest& req, SessionSpec& spec) {
  auto grammar = forced_tools_grammar(ctx, req.tool_choice, *req.tools, req.parallel_tool_calls);
  if (!grammar) return grammar.error();
  for (SessionChoice& c : spec.choices) {
    c.request.engine.constraint = grammar_constraint(grammar.value(), ctx.token_trie);
    c.forced_tools = req.tool_choice;
  }
  return std::nullopt;
}

}  // namespace

void handle_chat(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  KvLeaseGuard kv_lease(ctx.engine, *body);
  auto parsed = parse_chat_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  ChatCompletionRequest& req = parsed.value();
  auto model = resolve_model_name(ctx, req.model);
  if (!model) return reply_error(*r, model.error());
  auto rules = check_sampling(ctx, req.sampling);
  if (!rules) return reply_error(*r, rules.error());
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
  if (forced_tools && req.sampling.constraint)
    return reply_error(*r, bad_request("tool_choice \"required\" or a named function cannot be "
                                       "combined with a response_format or structured_outputs",
                                       "tool_choice"));
  if (ctx.tokenizer == nullptr)
    return reply_error(*r, bad_request("chat needs a tokenizer, which this model lacks"));

  const nlohmann::json kwargs = template_kwargs(req);
  ChatPromptOptions po;
  po.messages = &req.messages;
  po.tools = req.tools ? &*req.tools : nullptr;
  po.documents = req.documents ? &*req.documents : nullptr;
  po.add_generation_prompt = req.add_generation_prompt;
  po.continue_final_message = req.continue_final_message;
  po.chat_template = req.chat_template;
  po.chat_template_kwargs = &kwargs;
  auto text = render_chat_prompt(ctx, po);
  if (!text) return reply_error(*r, text.error());
  auto ids = prompt_token_ids(ctx, text.value(), req.add_special_tokens);
  if (!ids) return reply_error(*r, ids.error());
  auto fitted = fit_prompt(ctx, req.sampling, std::move(ids).value(), req.sampling.max_tokens);
  if (!fitted) return reply_error(*r, fitted.error());
  const FittedPrompt& prompt = fitted.value();

  SessionSpec spec = session_spec(StreamKind::kChat, model.value(), req.sampling);
  spec.include_reasoning = req.include_reasoning;
  log_unread(req.unread, spec.id);
  const std::string echo = echo_text(req);
  for (int64_t k = 0; k < req.sampling.n; ++k) {
    SessionChoice c;
    c.request = engine_request(ctx, req.sampling, rules.value(), prompt.ids, prompt.max_tokens);
    c.request.id = spec.id + "-" + std::to_string(k);
    if (req.sampling.seed) c.request.engine.seed += uint64_t(k);
    if (!ctx.reasoning_parser.empty())
      c.reasoning = chat::make_reasoning_parser(ctx.reasoning_parser, text.value());
    c.echo = echo;
    spec.choices.push_back(std::move(c));
  }
  if (auto e = constrain_choices(ctx, req.sampling.constraint, spec)) return reply_error(*r, *e);
  if (forced_tools) {
    if (auto e = force_tool_calls(ctx, req, spec)) return reply_error(*r, *e);
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
  kv_lease.disarm();  // the engine's from here, refusals included
  start_generation(ctx, std::move(r), std::move(spec));
}

}  // namespace kestrel::server
