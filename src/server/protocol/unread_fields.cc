#include "server/protocol/unread_fields.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

namespace kestrel::server {

namespace {

using nlohmann::json;

// When a set field changes nothing: it is absent, null, or one of these.
enum class NoOp { kNull, kFalse, kNullOrMinusOne, kTextModality };

enum : uint8_t { kChat = 1, kCompletion = 2, kResponses = 4, kAll = 7 };

struct Refused {
  std::string_view name;
  NoOp no_op;
  std::string_view why;  // the rest of the 400's message
  uint8_t endpoints = kChat | kCompletion;
};

constexpr Refused kRefused[] = {
    {"use_beam_search", NoOp::kFalse, "beam search is not supported; sample n choices instead"},
    {"watermarking", NoOp::kFalse, "output watermarking is not supported", kAll},
    {"logprob_token_ids", NoOp::kNull,
     "logprobs of chosen token ids are not supported; use logprobs/top_logprobs"},
    {"thinking_token_budget", NoOp::kNullOrMinusOne, "thinking token budgets are not supported"},
    {"repetition_detection", NoOp::kNull, "repetition detection is not supported"},
    {"return_token_ids", NoOp::kFalse, "token ids are not returned beside the text; use logprobs"},
    {"return_prompt_text", NoOp::kFalse, "the rendered prompt is not returned; use /tokenize",
     kChat},
    {"prompt_embeds", NoOp::kNull, "prompt embeddings are not supported; send text or token ids",
     kCompletion},
    {"enable_response_messages", NoOp::kFalse, "raw prompt and output messages are not returned",
     kResponses},
    // The guided_* fields left vLLM in 0.12; a client that still sends them wants a constraint.
    {"guided_json", NoOp::kNull, "it was removed from vLLM; use structured_outputs.json", kAll},
    {"guided_regex", NoOp::kNull, "it was removed from vLLM; use structured_outputs.regex", kAll},
    {"guided_choice", NoOp::kNull, "it was removed from vLLM; use structured_outputs.choice", kAll},
    {"guided_grammar", NoOp::kNull, "it was removed from vLLM; use structured_outputs.grammar",
     kAll},
    {"guided_whitespace_pattern", NoOp::kNull,
     "it was removed from vLLM; use structured_outputs.whitespace_pattern", kAll},
    // OpenAI fields vLLM does not implement either.
    {"functions", NoOp::kNull, "deprecated OpenAI function calling; use tools", kChat},
    {"function_call", NoOp::kNull, "deprecated OpenAI function calling; use tool_choice", kChat},
    {"audio", NoOp::kNull, "audio output is not supported (text-only models)", kChat},
    {"modalities", NoOp::kTextModality, "only the \"text\" modality is supported", kChat},
    {"web_search_options", NoOp::kNull, "web search is not supported", kChat},
    {"verbosity", NoOp::kNull, "verbosity hints are not supported", kChat},
};

// Fields that cannot change the output: logged and dropped.
constexpr std::string_view kIgnored[] = {
    "user", "session_id", "metadata", "store", "service_tier", "safety_identifier",
    "max_tool_calls", "include_obfuscation", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "prediction", "moderation",
    // Beam search only (refused above when enabled).
    "length_penalty", "early_stopping",
    // Only the render endpoints or disabled server features read these.
    "return_token_offsets", "return_mm_kwargs", "routed_experts_prompt_start",
    // Text-only models have no media to process.
    "mm_processor_kwargs", "media_io_kwargs", "ec_transfer_params",
    // Read by custom logits processors, of which Kestrel has none.
    "vllm_xargs",
    // Changes how many tokens a stream chunk carries, not the text.
    "stream_interval",
    // Backend choice and fallback of vLLM's structured-output engines.
    "guided_decoding_backend"};

bool is_no_op(const json& v, NoOp no_op) {
  if (v.is_null()) return true;
  switch (no_op) {
    case NoOp::kNull:
      return false;
    case NoOp::kFalse:
      return v.is_boolean() && !v.get<bool>();
    case NoOp::kNullOrMinusOne:
      return v.is_number_integer() && v.get<int64_t>() == -1;
    case NoOp::kTextModality:
      return v == json::array({"text"});
  }
  return false;
}

}  // namespace

std::optional<ProtocolError> check_unread_fields(const json& body,
                                                 const std::vector<std::string>& unread,
                                                 Endpoint endpoint, UnreadFields& out) {
  out = {};
  for (const std::string& key : unread) {
    const auto refused = std::find_if(std::begin(kRefused), std::end(kRefused),
                                      [&](const Refused& r) { return r.name == key; });
    const uint8_t bit = endpoint == Endpoint::kChat         ? kChat
                        : endpoint == Endpoint::kCompletion ? kCompletion
                                                            : kResponses;
    const bool applies = refused != std::end(kRefused) && (refused->endpoints & bit) != 0;
    if (applies && !is_no_op(body.at(key), refused->no_op))
      return bad_request(fmt::format("{} is not supported by Kestrel: {}", key, refused->why), key);
    const bool known =
        applies || std::find(std::begin(kIgnored), std::end(kIgnored), key) != std::end(kIgnored);
    (known ? out.ignored : out.unknown).push_back(key);
  }
  return std::nullopt;
}

}  // namespace kestrel::server
