// server/protocol/responses.h — OpenAI response bodies (completions, chat, their stream chunks,
// /v1/models, /tokenize, /detokenize) built from plain structs, keys in vLLM's order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace kestrel::server {

// "<prefix>-<32 random hex digits>", like vLLM's "cmpl-<uuid4 hex>".
std::string make_request_id(std::string_view prefix);
// `prefix` followed by `hex_digits` random hex digits ("resp_" + 16, as vLLM's Responses ids).
std::string random_hex_id(std::string_view prefix, int hex_digits);
int64_t unix_time_now();

// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD (as Python's
// errors="replace"), so that it can be serialised as JSON.
std::string sanitize_utf8(std::string_view text);

// What stopped a choice: nothing (null), a stop token id or a stop string.
using StopReason = std::variant<std::monostate, int64_t, std::string>;

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// One sampled (or echoed prompt) token with its log-probability and the top alternatives.
// Token strings may hold partial UTF-8; the builders sanitise them.
struct TokenLogprobInfo {
  std::string token;
  std::optional<float> logprob;  // none for the first echoed prompt token
  std::vector<std::pair<std::string, float>> top;
};

// One alternative at a prompt position, in vLLM's prompt_logprobs form.
struct PromptLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::string decoded_token;
};
// The alternatives at one prompt position; empty (→ null) for the first prompt token.
using PromptPositionLogprobs = std::vector<PromptLogprob>;

struct CompletionChoice {
  int64_t index = 0;
  std::string text;
  std::optional<std::vector<TokenLogprobInfo>> logprobs;
  // Character offset of the first logprobs token within the choice's full text (non-zero when
  // a stream chunk continues earlier text).
  int64_t text_offset_start = 0;
  std::optional<std::string> finish_reason;
  StopReason stop_reason;
  std::optional<std::vector<PromptPositionLogprobs>> prompt_logprobs;
};

struct CompletionResponseInfo {
  std::string id;  // make_request_id("cmpl")
  int64_t created = 0;
  std::string model;
  std::vector<CompletionChoice> choices;
  Usage usage;
  std::optional<nlohmann::json> kv_transfer_params;
};

struct ToolCallInfo {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ChatMessageInfo {
  std::string role = "assistant";
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ToolCallInfo> tool_calls;
};

struct ChatChoice {
  int64_t index = 0;
  ChatMessageInfo message;
  std::optional<std::vector<TokenLogprobInfo>> logprobs;
  std::optional<std::string> finish_reason;
  StopReason stop_reason;
};

struct ChatResponseInfo {
  std::string id;  // make_request_id("chatcmpl")
  int64_t created = 0;
  std::string model;
  std::vector<ChatChoice> choices;
  Usage usage;
  std::optional<std::vector<PromptPositionLogprobs>> prompt_logprobs;
  std::optional<nlohmann::json> kv_transfer_params;
};

// A streamed tool-call piece: the first for a call carries id and name, later ones only
// argument text.
struct ToolCallDelta {
  int64_t index = 0;
  std::optional<std::string> id;
  std::optional<std::string> name;
  std::optional<std::string> arguments;
};

// Only the fields that are set are sent, as vLLM does for deltas.
struct ChatDelta {
  std::optional<std::string> role;
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ToolCallDelta> tool_calls;
};

struct ChatStreamChoice {
  int64_t index = 0;
  ChatDelta delta;
  std::optional<std::vector<TokenLogprobInfo>> logprobs;
  std::optional<std::string> finish_reason;  // set on a choice's last chunk only
  StopReason stop_reason;                    // sent with finish_reason
};

enum class StreamKind { kCompletion, kChat };

nlohmann::ordered_json usage_json(const Usage& usage);

// {text_offset, token_logprobs, tokens, top_logprobs:[{token: logprob} | null]}
nlohmann::ordered_json completion_logprobs_json(const std::vector<TokenLogprobInfo>& tokens,
                                                int64_t text_offset_start);
// {content:[{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}], refusal:null}
nlohmann::ordered_json chat_logprobs_json(const std::vector<TokenLogprobInfo>& tokens);
// [null | {"<token id>": {logprob, rank, decoded_token}}]
nlohmann::ordered_json prompt_logprobs_json(const std::vector<PromptPositionLogprobs>& positions);

nlohmann::ordered_json completion_response(const CompletionResponseInfo& response);
// A /v1/completions stream chunk; `usage` only with continuous usage stats.
nlohmann::ordered_json completion_stream_chunk(const std::string& id, int64_t created,
                                               const std::string& model,
                                               const std::vector<CompletionChoice>& choices,
                                               const std::optional<Usage>& usage = std::nullopt);

nlohmann::ordered_json chat_response(const ChatResponseInfo& response);
nlohmann::ordered_json chat_stream_chunk(const std::string& id, int64_t created,
                                         const std::string& model,
                                         const std::vector<ChatStreamChoice>& choices,
                                         const std::optional<Usage>& usage = std::nullopt);

// The extra last chunk for stream_options.include_usage: choices [] and the totals.
nlohmann::ordered_json usage_chunk(StreamKind kind, const std::string& id, int64_t created,
                                   const std::string& model, const Usage& usage);

// A /v1/models entry and the list around entries.
nlohmann::ordered_json model_card(const std::string& id, int64_t created, const std::string& root,
                                  int64_t max_model_len);
nlohmann::ordered_json model_list(const std::vector<nlohmann::ordered_json>& cards);

// /tokenize: {count, max_model_len, tokens, token_strs}; /detokenize: {prompt}.
nlohmann::ordered_json tokenize_response(const std::vector<int32_t>& tokens, int64_t max_model_len,
                                         const std::optional<std::vector<std::string>>& token_strs);
nlohmann::ordered_json detokenize_response(const std::string& prompt);

}  // namespace kestrel::server
