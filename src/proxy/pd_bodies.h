// proxy/pd_bodies.h — how the PD proxy rewrites OpenAI requests and responses (issue 21), as
// vLLM-Ascend's load_balance_proxy_server_example.py does, plus the recompute continuation.
// Pure functions over JSON (key order kept, so untouched fields pass through as sent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kestrel::proxy {

using Json = nlohmann::ordered_json;

enum class ApiKind { kCompletion, kChat };

// The prefill instance's request: the client's body asking for one token, not streamed, with the
// prompt's KV kept for a decode instance (kv_transfer_params do_remote_decode).
Json prefill_body(const Json& client);

// The decode instance's request: the client's body with the prefill's kv_transfer_params; a
// streamed one asks for usage (`usage_forced` says whether the client had not), since the proxy
// counts the tokens of a decode that is recomputed.
Json decode_body(const Json& client, const Json& kv_transfer_params, bool* usage_forced);

// The prompt's tokens as the proxy estimates them before the prefill counts them: its text's
// UTF-8 bytes / 4, or the number of token ids.
int64_t estimate_prompt_tokens(const Json& body);
// max_completion_tokens, else max_tokens, else `fallback`.
int64_t max_output_tokens(const Json& body, int64_t fallback);

// After a decode instance gave a request back (stop_reason "recomputed"): the client's body whose
// prompt goes on with the text generated so far — a completion's prompt text extended, a chat's
// messages ending with the assistant's partial message, continued — and whose output budget is
// what is left. nullopt when the prompt cannot be extended (token ids, several prompts).
std::optional<Json> continuation_body(const Json& client, ApiKind kind,
                                      const std::string& generated, int64_t generated_tokens);

// The text a choice carries: a completion's `text`, a chat response's message content or a
// chat chunk's delta content.
std::string choice_text(const Json& choice, ApiKind kind);
// Whether a response or chunk's first choice was given back by the decode (stop_reason
// "recomputed").
bool is_recomputed(const Json& response);
// usage.prompt_tokens_details.cached_tokens set to `cached` (the prefill's count) when the
// object carries usage.
void patch_cached_tokens(Json& response, int64_t cached);
// The cached-token count of a response's usage (0 when absent).
int64_t cached_tokens(const Json& response);

}  // namespace kestrel::proxy
