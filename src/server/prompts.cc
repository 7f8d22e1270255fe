#include "server/prompts.h"

#include <algorithm>

#include "server/chat_conversation.h"

namespace kestrel::server {

namespace {

std::string special_token(const Tokenizer* tok, std::optional<int32_t> id) {
  if (tok == nullptr || !id) return "";
  return tok->token_bytes(*id);
}

// The chat_template_kwargs a renderer sees: the server's defaults under the request's.
nlohmann::ordered_json merged_kwargs(const ServingContext& ctx, const ChatPromptOptions& o) {
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  for (const auto& [k, v] : ctx.default_chat_template_kwargs.items())
    kwargs[k] = nlohmann::ordered_json(v);
  if (o.chat_template_kwargs)
    for (const auto& [k, v] : o.chat_template_kwargs->items())
      kwargs[k] = nlohmann::ordered_json(v);
  return kwargs;
}

// vLLM's DeepSeek tokenizer modes ignore the chat template, add_generation_prompt and
// continue_final_message: the encoder decides how the prompt ends.
ParseResult<std::string> render_deepseek(const ServingContext& ctx, const ChatPromptOptions& o) {
  const chat::DeepSeekEncoding encoding = *ctx.deepseek_encoding;
  // DeepSeek-V4's renderer passes content as parts (vLLM's "openai" format) and joins them
  // itself; V3.2's gets one string.
  const ContentForm form =
      encoding == chat::DeepSeekEncoding::kV4 ? ContentForm::kParts : ContentForm::kString;
  const nlohmann::ordered_json conversation =
      template_conversation(*o.messages, ArgumentsForm::kObject, form);
  std::optional<nlohmann::ordered_json> tools;
  if (o.tools) tools = nlohmann::ordered_json(*o.tools);
  auto text = chat::render_deepseek_prompt(encoding, conversation, tools ? &*tools : nullptr,
                                           merged_kwargs(ctx, o));
  if (!text.ok()) return bad_request("chat prompt: " + text.error().message, "messages");
  return std::move(*text);
}

}  // namespace

ParseResult<std::string> render_chat_prompt(const ServingContext& ctx, const ChatPromptOptions& o) {
  if (ctx.deepseek_encoding) return render_deepseek(ctx, o);
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
  const nlohmann::ordered_json kwargs = merged_kwargs(ctx, o);
  for (const auto& [k, v] : kwargs.items()) context[k] = v;

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
