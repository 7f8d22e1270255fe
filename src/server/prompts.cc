#include "server/prompts.h"

#include <algorithm>

#include "server/chat_conversation.h"

namespace kestrel::server {

namespace {

std::string special_token(const Tokenizer* tok, std::optional<int32_t> id) {
  if (tok == nullptr || !id) return "";
  return tok->token_bytes(*id);
}

}  // namespace

ParseResult<std::string> render_chat_prompt(const ServingContext& ctx, const ChatPromptOptions& o) {
  std::optional<chat::ChatTemplate> own;
  const chat::ChatTemplate* tmpl = nullptr;
  if (o.chat_template) {
    auto parsed = chat::ChatTemplate::parse(*o.chat_template);
    if (!parsed.ok())
      return bad_request("chat_template: " + parsed.error().message, "chat_template");
    own = std::move(*parsed);
    tmpl = &*own;
  } else if (ctx.chat_template) {
    tmpl = &*ctx.chat_template;
  } else {
    return bad_request("this model has no chat template (" + ctx.chat_template_missing +
                       "); pass one with --chat-template or the request's chat_template");
  }

  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = template_conversation(*o.messages);
  if (o.tools) context["tools"] = nlohmann::ordered_json(*o.tools);
  if (o.documents) context["documents"] = nlohmann::ordered_json(*o.documents);
  context["add_generation_prompt"] = o.add_generation_prompt;
  if (ctx.tokenizer) {
    context["bos_token"] = special_token(ctx.tokenizer, ctx.tokenizer->bos_id());
    const auto& eos = ctx.tokenizer->eos_ids();
    context["eos_token"] =
        special_token(ctx.tokenizer, eos.empty() ? std::nullopt : std::optional(eos[0]));
  }
  for (const auto& [k, v] : ctx.default_chat_template_kwargs.items())
    context[k] = nlohmann::ordered_json(v);
  if (o.chat_template_kwargs)
    for (const auto& [k, v] : o.chat_template_kwargs->items())
      context[k] = nlohmann::ordered_json(v);

  auto rendered = tmpl->render(context);
  if (!rendered.ok() && has_text_arguments(*o.messages)) {
    // Some templates concatenate the arguments as text (DeepSeek-V3.1's): give them the JSON
    // text the client sent.
    context["messages"] = template_conversation(*o.messages, ArgumentsForm::kText);
    auto as_text = tmpl->render(context);
    if (as_text.ok()) rendered = std::move(as_text);
  }
  if (!rendered.ok()) return bad_request("chat template error: " + rendered.error().message);
  const nlohmann::ordered_json& messages = context["messages"];
  std::string text = std::move(*rendered);
  if (o.continue_final_message) {
    const auto& last = messages.back();
    const std::string content = last["content"].get<std::string>();
    const size_t at = content.empty() ? std::string::npos : text.rfind(content);
    if (at == std::string::npos)
      return bad_request(
          "continue_final_message: the final message's content does not appear in the rendered "
          "prompt");
    text.resize(at + content.size());
  }
  return text;
}

ParseResult<std::vector<int32_t>> prompt_token_ids(const ServingContext& ctx,
                                                   const PromptInput& prompt,
                                                   bool add_special_tokens) {
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    if (ctx.tokenizer == nullptr)
      return bad_request("this model has no tokenizer: send the prompt as token ids", "prompt");
    std::vector<int32_t> ids = ctx.tokenizer->encode(*text, add_special_tokens);
    if (ids.empty()) return bad_request("the prompt encodes to no tokens", "prompt");
    return ids;
  }
  const auto& ids = std::get<std::vector<int32_t>>(prompt);
  for (int32_t id : ids)
    if (id < 0 || id >= ctx.vocab_size)
      return bad_request("Token id " + std::to_string(id) + " is out of vocabulary", "prompt");
  return ids;
}

ParseResult<std::string> resolve_model_name(const ServingContext& ctx,
                                            const std::optional<std::string>& requested) {
  if (!requested || requested->empty()) return ctx.served_model_names.front();
  const auto& names = ctx.served_model_names;
  if (std::find(names.begin(), names.end(), *requested) == names.end())
    return model_not_found(*requested);
  return *requested;
}

}  // namespace kestrel::server
