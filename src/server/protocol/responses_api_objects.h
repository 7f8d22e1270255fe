// server/protocol/responses_api_objects.h — the JSON of the Responses API: the response object
// (keys in vLLM's order, nulls included), its output items (reasoning, message, function_call),
// usage, and the SSE events of a streamed response ("event: <type>\ndata: <json>\n\n", numbered
// from 0, no [DONE]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/responses.h"

namespace kestrel::server {

struct ResponsesUsage {
  int64_t input_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t output_tokens = 0;
  int64_t reasoning_tokens = 0;
};

// What a response object says besides its output: identity, status and the settings it ran
// with. `echo` holds the request fields echoed as sent (ResponsesRequest::echo).
struct ResponseHeader {
  std::string id;
  int64_t created_at = 0;
  std::string model;
  std::string status = "in_progress";  // queued | in_progress | completed | incomplete | ...
  nlohmann::json echo = nlohmann::json::object();
  double temperature = 1.0;
  double top_p = 1.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  int64_t max_output_tokens = 0;
  std::optional<int64_t> top_logprobs;  // set when logprobs are included
};

// The response object; `output` is an array of items, `usage` unset while running.
nlohmann::ordered_json response_object(const ResponseHeader& header,
                                       const nlohmann::ordered_json& output,
                                       const std::optional<ResponsesUsage>& usage);

// Output items. `status` is "in_progress", "completed", "incomplete" or null (a finished
// non-streamed reasoning item, as vLLM reports it).
nlohmann::ordered_json reasoning_item(const std::string& id, const std::string* text,
                                      const nlohmann::ordered_json& status);
nlohmann::ordered_json message_item(const std::string& id,
                                    const nlohmann::ordered_json& content_parts,
                                    const std::string& status);
nlohmann::ordered_json output_text_part(const std::string& text,
                                        const nlohmann::ordered_json& logprobs);
nlohmann::ordered_json reasoning_text_part(const std::string& text);
nlohmann::ordered_json function_call_item(const std::string& id, const ToolCallInfo& call,
                                          const std::string& status);

// Logprobs of output text in the Responses form ([{token, logprob, bytes, top_logprobs}]).
nlohmann::ordered_json output_text_logprobs(const std::vector<TokenLogprobInfo>& tokens);

// One SSE event; `payload` gets its "sequence_number" and "type" here.
std::string response_event(const std::string& type, nlohmann::ordered_json payload,
                           int64_t sequence_number);

}  // namespace kestrel::server
