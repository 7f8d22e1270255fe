#include "server/protocol/responses.h"

#include <chrono>
#include <cmath>
#include <random>

#include "tokenizer/utf8_sequence.h"

namespace kestrel::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// JSON has no -inf; OpenAI documents -9999.0 as the value for "very unlikely".
constexpr float kMinLogprob = -9999.0f;

float finite_logprob(std::optional<float> logprob) {
  if (!logprob || std::isnan(*logprob)) return kMinLogprob;
  return std::max(*logprob, kMinLogprob);
}

ordered_json optional_string(const std::optional<std::string>& s) {
  return s ? ordered_json(sanitize_utf8(*s)) : ordered_json(nullptr);
}

ordered_json stop_reason_json(const StopReason& reason) {
  if (const auto* id = std::get_if<int64_t>(&reason)) return *id;
  if (const auto* s = std::get_if<std::string>(&reason)) return sanitize_utf8(*s);
  return nullptr;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

ordered_json utf8_bytes(std::string_view token) {
  ordered_json bytes = ordered_json::array();
  for (const char c : token) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

ordered_json chat_token_logprob(const std::string& token, std::optional<float> logprob) {
  ordered_json entry;
  entry["token"] = sanitize_utf8(token);
  entry["logprob"] = finite_logprob(logprob);
  entry["bytes"] = utf8_bytes(token);  // the raw bytes, so clients can join partial characters
  return entry;
}

ordered_json tool_call_json(const ToolCallInfo& call) {
  ordered_json function;
  function["name"] = sanitize_utf8(call.name);
  function["arguments"] = sanitize_utf8(call.arguments);
  ordered_json out;
  out["id"] = call.id;
  out["type"] = "function";
  out["function"] = std::move(function);
  return out;
}

ordered_json tool_call_delta_json(const ToolCallDelta& delta) {
  ordered_json out;
  if (delta.id) {
    out["id"] = *delta.id;
    out["type"] = "function";
  }
  out["index"] = delta.index;
  ordered_json function = ordered_json::object();
  if (delta.name) function["name"] = sanitize_utf8(*delta.name);
  if (delta.arguments) function["arguments"] = sanitize_utf8(*delta.arguments);
  out["function"] = std::move(function);
  return out;
}

ordered_json chat_message_json(const ChatMessageInfo& message) {
  ordered_json out;
  out["role"] = message.role;
  out["content"] = optional_string(message.content);
  out["refusal"] = nullptr;
  out["annotations"] = nullptr;
  out["audio"] = nullptr;
  out["function_call"] = nullptr;
  // Always present, [] when there are none, as vLLM's ChatMessage sends it.
  ordered_json calls = ordered_json::array();
  for (const ToolCallInfo& call : message.tool_calls) calls.push_back(tool_call_json(call));
  out["tool_calls"] = std::move(calls);
  out["reasoning"] = optional_string(message.reasoning);
  // Older clients read the pre-rename field.
  out["reasoning_content"] = optional_string(message.reasoning);
  return out;
}

ordered_json chat_delta_json(const ChatDelta& delta) {
  ordered_json out = ordered_json::object();
  if (delta.role) out["role"] = *delta.role;
  if (delta.content) out["content"] = sanitize_utf8(*delta.content);
  if (delta.reasoning) {
    out["reasoning"] = sanitize_utf8(*delta.reasoning);
    out["reasoning_content"] = out["reasoning"];
  }
  if (!delta.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const ToolCallDelta& call : delta.tool_calls) calls.push_back(tool_call_delta_json(call));
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

ordered_json completion_choice_json(const CompletionChoice& choice, bool with_prompt_logprobs) {
  ordered_json out;
  out["index"] = choice.index;
  out["text"] = sanitize_utf8(choice.text);
  out["logprobs"] = choice.logprobs
                        ? completion_logprobs_json(*choice.logprobs, choice.text_offset_start)
                        : ordered_json(nullptr);
  out["finish_reason"] = optional_string(choice.finish_reason);
  out["stop_reason"] = stop_reason_json(choice.stop_reason);
  if (with_prompt_logprobs) {
    out["prompt_logprobs"] = choice.prompt_logprobs ? prompt_logprobs_json(*choice.prompt_logprobs)
                                                    : ordered_json(nullptr);
  }
  return out;
}

ordered_json chunk_header(const std::string& id, StreamKind kind, int64_t created,
                          const std::string& model) {
  ordered_json out;
  out["id"] = id;
  out["object"] = kind == StreamKind::kChat ? "chat.completion.chunk" : "text_completion";
  out["created"] = created;
  out["model"] = model;
  return out;
}

}  // namespace

std::string random_hex_id(std::string_view prefix, int hex_digits) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  uint64_t bits = 0;
  for (int i = 0; i < hex_digits; ++i, bits >>= 4) {
    if (i % 16 == 0) bits = rng();
    id += kHex[bits & 0xF];
  }
  return id;
}

std::string make_request_id(std::string_view prefix) {
  return random_hex_id(std::string(prefix) + "-", 32);
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const Utf8Sequence seq = utf8_sequence(text);
    if (seq.kind == Utf8Sequence::kValid) {
      out.append(text.substr(0, seq.length));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    text.remove_prefix(seq.length);
  }
  return out;
}

ordered_json usage_json(const Usage& usage) {
  ordered_json out;
  out["prompt_tokens"] = usage.prompt_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  return out;
}

ordered_json completion_logprobs_json(const std::vector<TokenLogprobInfo>& tokens,
                                      int64_t text_offset_start) {
  ordered_json text_offset = ordered_json::array();
  ordered_json token_logprobs = ordered_json::array();
  ordered_json token_strings = ordered_json::array();
  ordered_json top_logprobs = ordered_json::array();
  int64_t offset = text_offset_start;
  for (const TokenLogprobInfo& t : tokens) {
    const std::string token = sanitize_utf8(t.token);
    text_offset.push_back(offset);
    offset += static_cast<int64_t>(count_code_points(token));
    token_strings.push_back(token);
    if (!t.logprob) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(finite_logprob(t.logprob));
    ordered_json top = ordered_json::object();
    for (const auto& [alt, logprob] : t.top) top[sanitize_utf8(alt)] = finite_logprob(logprob);
    top_logprobs.push_back(std::move(top));
  }
  ordered_json out;
  out["text_offset"] = std::move(text_offset);
  out["token_logprobs"] = std::move(token_logprobs);
  out["tokens"] = std::move(token_strings);
  out["top_logprobs"] = std::move(top_logprobs);
  return out;
}

ordered_json chat_logprobs_json(const std::vector<TokenLogprobInfo>& tokens) {
  ordered_json content = ordered_json::array();
  for (const TokenLogprobInfo& t : tokens) {
    ordered_json entry = chat_token_logprob(t.token, t.logprob);
    ordered_json top = ordered_json::array();
    for (const auto& [alt, logprob] : t.top) top.push_back(chat_token_logprob(alt, logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  ordered_json out;
  out["content"] = std::move(content);
  out["refusal"] = nullptr;  // required by the OpenAI schema
  return out;
}

ordered_json prompt_logprobs_json(const std::vector<PromptPositionLogprobs>& positions) {
  ordered_json out = ordered_json::array();
  for (const PromptPositionLogprobs& position : positions) {
    if (position.empty()) {
      out.push_back(nullptr);
      continue;
    }
    ordered_json alternatives = ordered_json::object();
    for (const PromptLogprob& p : position) {
      ordered_json entry;
      entry["logprob"] = finite_logprob(p.logprob);
      entry["rank"] = p.rank;
      entry["decoded_token"] = sanitize_utf8(p.decoded_token);
      alternatives[std::to_string(p.token_id)] = std::move(entry);
    }
    out.push_back(std::move(alternatives));
  }
  return out;
}

ordered_json completion_response(const CompletionResponseInfo& response) {
  ordered_json out;
  out["id"] = response.id;
  out["object"] = "text_completion";
  out["created"] = response.created;
  out["model"] = response.model;
  ordered_json choices = ordered_json::array();
  for (const CompletionChoice& c : response.choices) {
    choices.push_back(completion_choice_json(c, /*with_prompt_logprobs=*/true));
  }
  out["choices"] = std::move(choices);
  out["usage"] = usage_json(response.usage);
  out["kv_transfer_params"] = response.kv_transfer_params
                                  ? ordered_json(*response.kv_transfer_params)
                                  : ordered_json(nullptr);
  return out;
}

ordered_json completion_stream_chunk(const std::string& id, int64_t created,
                                     const std::string& model,
                                     const std::vector<CompletionChoice>& choices,
                                     const std::optional<Usage>& usage) {
  ordered_json out = chunk_header(id, StreamKind::kCompletion, created, model);
  ordered_json list = ordered_json::array();
  for (const CompletionChoice& c : choices) {
    list.push_back(completion_choice_json(c, /*with_prompt_logprobs=*/false));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage ? usage_json(*usage) : ordered_json(nullptr);
  return out;
}

ordered_json chat_response(const ChatResponseInfo& response) {
  ordered_json out;
  out["id"] = response.id;
  out["object"] = "chat.completion";
  out["created"] = response.created;
  out["model"] = response.model;
  ordered_json choices = ordered_json::array();
  for (const ChatChoice& c : response.choices) {
    ordered_json choice;
    choice["index"] = c.index;
    choice["message"] = chat_message_json(c.message);
    choice["logprobs"] = c.logprobs ? chat_logprobs_json(*c.logprobs) : ordered_json(nullptr);
    choice["finish_reason"] = optional_string(c.finish_reason);
    choice["stop_reason"] = stop_reason_json(c.stop_reason);
    choices.push_back(std::move(choice));
  }
  out["choices"] = std::move(choices);
  out["usage"] = usage_json(response.usage);
  out["prompt_logprobs"] = response.prompt_logprobs
                               ? prompt_logprobs_json(*response.prompt_logprobs)
                               : ordered_json(nullptr);
  out["kv_transfer_params"] = response.kv_transfer_params
                                  ? ordered_json(*response.kv_transfer_params)
                                  : ordered_json(nullptr);
  return out;
}

ordered_json chat_stream_chunk(const std::string& id, int64_t created, const std::string& model,
                               const std::vector<ChatStreamChoice>& choices,
                               const std::optional<Usage>& usage) {
  ordered_json out = chunk_header(id, StreamKind::kChat, created, model);
  ordered_json list = ordered_json::array();
  for (const ChatStreamChoice& c : choices) {
    ordered_json choice;
    choice["index"] = c.index;
    choice["delta"] = chat_delta_json(c.delta);
    choice["logprobs"] = c.logprobs ? chat_logprobs_json(*c.logprobs) : ordered_json(nullptr);
    choice["finish_reason"] = optional_string(c.finish_reason);
    if (c.finish_reason) choice["stop_reason"] = stop_reason_json(c.stop_reason);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  if (usage) out["usage"] = usage_json(*usage);
  return out;
}

ordered_json usage_chunk(StreamKind kind, const std::string& id, int64_t created,
                         const std::string& model, const Usage& usage) {
  ordered_json out = chunk_header(id, kind, created, model);
  out["choices"] = ordered_json::array();
  out["usage"] = usage_json(usage);
  return out;
}

ordered_json model_card(const std::string& id, int64_t created, const std::string& root,
                        int64_t max_model_len) {
  ordered_json out;
  out["id"] = id;
  out["object"] = "model";
  out["created"] = created;
  out["owned_by"] = "kestrel";
  out["root"] = root;
  out["parent"] = nullptr;
  out["max_model_len"] = max_model_len;
  out["permission"] = ordered_json::array();
  return out;
}

ordered_json model_list(const std::vector<ordered_json>& cards) {
  ordered_json out;
  out["object"] = "list";
  out["data"] = cards;
  return out;
}

ordered_json tokenize_response(const std::vector<int32_t>& tokens, int64_t max_model_len,
                               const std::optional<std::vector<std::string>>& token_strs) {
  ordered_json out;
  out["count"] = tokens.size();
  out["max_model_len"] = max_model_len;
  out["tokens"] = tokens;
  if (token_strs) {
    ordered_json strs = ordered_json::array();
    for (const std::string& s : *token_strs) strs.push_back(sanitize_utf8(s));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return out;
}

ordered_json detokenize_response(const std::string& prompt) {
  ordered_json out;
  out["prompt"] = sanitize_utf8(prompt);
  return out;
}

}  // namespace kestrel::server
