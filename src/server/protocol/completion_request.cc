#include "server/protocol/completion_request.h"

#include <utility>

#include <fmt/format.h>

#include "server/protocol/field_reader.h"

namespace kestrel::server {

using nlohmann::json;

namespace {

constexpr int64_t kDefaultMaxTokens = 16;
constexpr const char* kPromptTypeMessage =
    "prompt must be a string, an array of strings, an array of token ids or an array of "
    "token-id arrays";

// A token-id list, or nullopt if `value` is not an array of valid token ids.
std::optional<std::vector<int32_t>> to_token_ids(const json& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (const json& item : value) {
    const std::optional<int32_t> id = json_to_token_id(item);
    if (!id) return std::nullopt;
    ids.push_back(*id);
  }
  return ids;
}

ParseResult<std::vector<PromptInput>> parse_prompt(const json* prompt) {
  if (prompt == nullptr || (prompt->is_string() && prompt->get_ref<const std::string&>().empty())) {
    return bad_request("Either prompt or prompt_embeds must be provided and non-empty.", "prompt");
  }
  if (prompt->is_string()) return std::vector<PromptInput>{prompt->get<std::string>()};
  if (!prompt->is_array()) return bad_request(kPromptTypeMessage, "prompt");
  if (prompt->empty()) return bad_request("prompt must not be an empty array", "prompt");

  const json& first = prompt->front();
  std::vector<PromptInput> prompts;
  if (first.is_number()) {  // a single prompt given as token ids
    std::optional<std::vector<int32_t>> ids = to_token_ids(*prompt);
    if (!ids) return bad_request(kPromptTypeMessage, "prompt");
    prompts.emplace_back(std::move(*ids));
    return prompts;
  }
  for (const json& item : *prompt) {
    if (first.is_string() && item.is_string()) {
      if (item.get_ref<const std::string&>().empty()) {
        return bad_request("prompt must not contain an empty string", "prompt");
      }
      prompts.emplace_back(item.get<std::string>());
      continue;
    }
    std::optional<std::vector<int32_t>> ids = first.is_array() ? to_token_ids(item) : std::nullopt;
    if (!ids) return bad_request(kPromptTypeMessage, "prompt");
    if (ids->empty()) return bad_request("prompt must not contain an empty token list", "prompt");
    prompts.emplace_back(std::move(*ids));
  }
  return prompts;
}

}  // namespace

ParseResult<CompletionRequest> parse_completion_request(const json& body) {
  if (!body.is_object()) return bad_request("request body must be a JSON object");
  FieldReader reader(body);
  CompletionRequest req;
  reader.read_string("model", req.model);
  const json* prompt = reader.get("prompt");
  reader.read_bool("echo", req.echo);
  reader.read_int("best_of", req.best_of);
  reader.read_bool("add_special_tokens", req.add_special_tokens);
  const json* suffix = reader.get("suffix");
  std::optional<int64_t> max_tokens;
  reader.read_int("max_tokens", max_tokens);
  reader.read_int("logprobs", req.sampling.logprobs);
  read_sampling_fields(reader, req.sampling);
  if (reader.failed()) return reader.error();

  ParseResult<std::vector<PromptInput>> prompts = parse_prompt(prompt);
  if (!prompts) return prompts.error();
  req.prompts = std::move(prompts).value();

  if (suffix != nullptr) return bad_request("suffix is not currently supported", "suffix");

  // Absent means 16; an explicit null means "the rest of the context", as in vLLM.
  const auto given = body.find("max_tokens");
  const bool explicit_null = given != body.end() && given->is_null();
  if (!explicit_null) req.sampling.max_tokens = max_tokens.value_or(kDefaultMaxTokens);
  const int64_t min_max_tokens = req.echo ? 0 : 1;
  if (req.sampling.max_tokens && *req.sampling.max_tokens < min_max_tokens) {
    return bad_request(fmt::format("max_tokens must be at least {}, got {}.", min_max_tokens,
                                   *req.sampling.max_tokens),
                       "max_tokens");
  }
  if (auto e = validate_sampling_fields(req.sampling)) return *e;
  if (req.best_of && *req.best_of < req.sampling.n) {
    return bad_request(fmt::format("best_of must be greater than or equal to n, got n={} and "
                                   "best_of={}.",
                                   req.sampling.n, *req.best_of),
                       "best_of");
  }
  if (auto e = check_unread_fields(body, reader.unknown_keys(), Endpoint::kCompletion, req.unread))
    return *e;
  return req;
}

}  // namespace kestrel::server
