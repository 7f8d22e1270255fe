#include "server/protocol/chat_request.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "server/protocol/field_reader.h"

namespace kestrel::server {

using nlohmann::json;

namespace {

std::optional<ProtocolError> check_documents(const json& documents) {
  bool ok = documents.is_array();
  for (size_t i = 0; ok && i < documents.size(); ++i) ok = documents[i].is_object();
  if (!ok) return type_error("documents", "an array of objects");
  return std::nullopt;
}

// logprobs (bool) and top_logprobs (count) → sampling.logprobs.
std::optional<ProtocolError> read_logprobs(FieldReader& reader, SamplingFields& sampling) {
  bool logprobs = false;
  int64_t top_logprobs = 0;
  reader.read_bool("logprobs", logprobs);
  reader.read_int("top_logprobs", top_logprobs);
  if (reader.failed()) return std::nullopt;
  if (auto e = check_logprobs_count("top_logprobs", top_logprobs)) return e;
  if (top_logprobs > 0 && !logprobs) {
    return bad_request("when using `top_logprobs`, `logprobs` must be set to true.",
                       "top_logprobs");
  }
  if (logprobs) sampling.logprobs = top_logprobs;
  return std::nullopt;
}

// max_completion_tokens wins over the deprecated max_tokens.
std::optional<ProtocolError> read_max_tokens(FieldReader& reader, SamplingFields& sampling) {
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> max_completion_tokens;
  reader.read_int("max_tokens", max_tokens);
  reader.read_int("max_completion_tokens", max_completion_tokens);
  if (reader.failed()) return std::nullopt;
  const char* key = max_completion_tokens ? "max_completion_tokens" : "max_tokens";
  sampling.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (sampling.max_tokens && *sampling.max_tokens < 1) {
    return bad_request(fmt::format("{} must be at least 1, got {}.", key, *sampling.max_tokens),
                       key);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProtocolError> read_generation_prompt_flags(FieldReader& reader,
                                                          bool& add_generation_prompt,
                                                          bool& continue_final_message) {
  reader.read_bool("add_generation_prompt", add_generation_prompt);
  reader.read_bool("continue_final_message", continue_final_message);
  if (!reader.failed() && add_generation_prompt && continue_final_message) {
    return bad_request(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        "continue_final_message");
  }
  return std::nullopt;
}

ParseResult<ChatCompletionRequest> parse_chat_request(const json& body) {
  if (!body.is_object()) return bad_request("request body must be a JSON object");
  FieldReader reader(body);
  ChatCompletionRequest req;
  reader.read_string("model", req.model);
  if (reader.failed()) return reader.error();

  const json* messages = reader.get("messages");
  if (messages == nullptr) return bad_request("messages is required", "messages");
  if (auto e = validate_chat_messages(*messages)) return *e;
  req.messages = *messages;

  const json* tools = reader.get("tools");
  if (tools != nullptr) {
    if (auto e = validate_tools(*tools)) return *e;
    req.tools = *tools;
  }
  ParseResult<ToolChoice> tool_choice = parse_tool_choice(reader.get("tool_choice"), tools);
  if (!tool_choice) return tool_choice.error();
  req.tool_choice = std::move(tool_choice).value();

  reader.read_bool("parallel_tool_calls", req.parallel_tool_calls);
  reader.read_string("chat_template", req.chat_template);
  reader.read_object("chat_template_kwargs", req.chat_template_kwargs);
  if (auto e = read_generation_prompt_flags(reader, req.add_generation_prompt,
                                            req.continue_final_message)) {
    return *e;
  }
  reader.read_bool("add_special_tokens", req.add_special_tokens);
  reader.read_bool("echo", req.echo);
  if (const json* documents = reader.get("documents")) {
    if (auto e = check_documents(*documents)) return *e;
    req.documents = *documents;
  }
  reader.read_string("reasoning_effort", req.reasoning_effort);
  reader.read_bool("include_reasoning", req.include_reasoning);
  if (auto e = read_logprobs(reader, req.sampling)) return *e;
  if (auto e = read_max_tokens(reader, req.sampling)) return *e;
  read_sampling_fields(reader, req.sampling);
  if (reader.failed()) return reader.error();
  if (req.reasoning_effort) {
    static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium",
                                               "high", "xhigh",   "max"};
    if (std::find(std::begin(kEfforts), std::end(kEfforts), *req.reasoning_effort) ==
        std::end(kEfforts))
      return bad_request(fmt::format("reasoning_effort must be one of none, minimal, low, medium, "
                                     "high, xhigh, max; got '{}'",
                                     *req.reasoning_effort),
                         "reasoning_effort");
  }
  if (auto e = validate_sampling_fields(req.sampling)) return *e;
  if (auto e = check_unread_fields(body, reader.unknown_keys(), Endpoint::kChat, req.unread))
    return *e;
  return req;
}

}  // namespace kestrel::server
