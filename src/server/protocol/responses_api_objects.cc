#include "server/protocol/responses_api_objects.h"

#include <utility>

namespace kestrel::server {

namespace {

using ojson = nlohmann::ordered_json;

ojson echoed(const nlohmann::json& echo, const char* key) {
  const auto it = echo.find(key);
  return it == echo.end() ? ojson(nullptr) : ojson(*it);
}

ojson usage_object(const ResponsesUsage& u) {
  ojson out;
  out["input_tokens"] = u.input_tokens;
  out["input_tokens_details"] = {{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", 0}};
  out["output_tokens"] = u.output_tokens;
  out["output_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
  out["total_tokens"] = u.input_tokens + u.output_tokens;
  return out;
}

}  // namespace

ojson response_object(const ResponseHeader& h, const ojson& output,
                      const std::optional<ResponsesUsage>& usage) {
  ojson out;
  out["id"] = h.id;
  out["created_at"] = h.created_at;
  out["incomplete_details"] =
      h.status == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr);
  out["instructions"] = echoed(h.echo, "instructions");
  out["metadata"] = echoed(h.echo, "metadata");
  out["model"] = h.model;
  out["object"] = "response";
  out["output"] = output;
  out["parallel_tool_calls"] = echoed(h.echo, "parallel_tool_calls");
  out["temperature"] = h.temperature;
  out["tool_choice"] = echoed(h.echo, "tool_choice");
  out["tools"] = echoed(h.echo, "tools");
  out["top_p"] = h.top_p;
  out["background"] = echoed(h.echo, "background");
  out["max_output_tokens"] = h.max_output_tokens;
  out["max_tool_calls"] = echoed(h.echo, "max_tool_calls");
  out["previous_response_id"] = echoed(h.echo, "previous_response_id");
  out["prompt"] = nullptr;
  out["prompt_cache_options"] = echoed(h.echo, "prompt_cache_options");
  out["prompt_cache_key"] = echoed(h.echo, "prompt_cache_key");
  out["prompt_cache_retention"] = echoed(h.echo, "prompt_cache_retention");
  out["reasoning"] = echoed(h.echo, "reasoning");
  out["safety_identifier"] = echoed(h.echo, "safety_identifier");
  out["service_tier"] = echoed(h.echo, "service_tier");
  out["status"] = h.status;
  out["text"] = echoed(h.echo, "text");
  out["top_logprobs"] = h.top_logprobs ? ojson(*h.top_logprobs) : ojson(nullptr);
  out["truncation"] = echoed(h.echo, "truncation");
  out["usage"] = usage ? usage_object(*usage) : ojson(nullptr);
  out["user"] = echoed(h.echo, "user");
  out["presence_penalty"] = h.presence_penalty;
  out["frequency_penalty"] = h.frequency_penalty;
  out["kv_transfer_params"] = nullptr;
  return out;
}

ojson reasoning_item(const std::string& id, const std::string* text, const ojson& status) {
  ojson out;
  out["id"] = id;
  out["summary"] = ojson::array();
  out["type"] = "reasoning";
  out["content"] = text != nullptr ? ojson::array({reasoning_text_part(*text)}) : ojson(nullptr);
  out["encrypted_content"] = nullptr;
  out["status"] = status;
  return out;
}

ojson message_item(const std::string& id, const ojson& content_parts, const std::string& status) {
  ojson out;
  out["id"] = id;
  out["content"] = content_parts;
  out["role"] = "assistant";
  out["status"] = status;
  out["type"] = "message";
  return out;
}

ojson output_text_part(const std::string& text, const ojson& logprobs) {
  ojson out;
  out["annotations"] = ojson::array();
  out["text"] = sanitize_utf8(text);
  out["type"] = "output_text";
  out["logprobs"] = logprobs;
  return out;
}

ojson reasoning_text_part(const std::string& text) {
  ojson out;
  out["text"] = sanitize_utf8(text);
  out["type"] = "reasoning_text";
  return out;
}

ojson function_call_item(const std::string& id, const ToolCallInfo& call,
                         const std::string& status) {
  ojson out;
  out["arguments"] = sanitize_utf8(call.arguments);
  out["call_id"] = call.id;
  out["name"] = call.name;
  out["type"] = "function_call";
  out["id"] = id;
  out["status"] = status;
  return out;
}

ojson output_text_logprobs(const std::vector<TokenLogprobInfo>& tokens) {
  return chat_logprobs_json(tokens)["content"];
}

std::string response_event(const std::string& type, ojson payload, int64_t sequence_number) {
  payload["sequence_number"] = sequence_number;
  payload["type"] = type;
  return "event: " + type +
         "\ndata: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n\n";
}

}  // namespace kestrel::server
