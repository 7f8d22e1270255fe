// server/generation_requests.h — from parsed request fields to engine requests, shared by
// /v1/completions, /v1/chat/completions and /v1/responses: the checks that need the served
// model (vocabulary, logprob limits, context length), prompt truncation, the engine request of
// one choice, and the structured-output constraint of every choice. Called on the thread that
// handles the request; reads the ServingContext only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_client.h"
#include "server/generation_session.h"
#include "server/protocol/protocol_error.h"
#include "server/protocol/sampling_fields.h"
#include "server/protocol/unread_fields.h"
#include "server/serving_context.h"
#include "structured/grammar.h"

namespace kestrel::server {

// Checks of the shared fields against the served model and server: logprob limits, token ids
// in logit_bias / allowed_token_ids inside the vocabulary, a tokenizer for stop strings and
// bad_words, priority scheduling. Returns the token rules to apply when all pass.
ParseResult<LogitsRules> check_sampling(const ServingContext& ctx, const SamplingFields& s);

struct FittedPrompt {
  std::vector<int32_t> ids;
  int64_t max_tokens = 0;
};

// Applies truncate_prompt_tokens, then fits the prompt and its output into the context: an unset
// max_tokens takes the rest of the window. Over-long requests get vLLM's context-length 400.
ParseResult<FittedPrompt> fit_prompt(const ServingContext& ctx, const SamplingFields& s,
                                     std::vector<int32_t> ids, std::optional<int64_t> max_tokens);

// The engine request for one choice. `rules` comes from check_sampling().
GenerateRequest engine_request(const ServingContext& ctx, const SamplingFields& s,
                               const LogitsRules& rules, std::vector<int32_t> prompt,
                               int64_t max_tokens);

// The grammar of a request's output constraint; the error is the 400 for a constraint Kestrel
// cannot compile (or a model without a tokenizer).
ParseResult<std::shared_ptr<const structured::Grammar>> constraint_grammar(
    const ServingContext& ctx, const OutputConstraint& constraint);

// Every choice gets its own matcher of the request's output constraint (none: unchanged); the
// error is the 400 from constraint_grammar().
std::optional<ProtocolError> constrain_choices(const ServingContext& ctx,
                                               const std::optional<OutputConstraint>& constraint,
                                               SessionSpec& spec);

// tool_choice "required" or a named function: the grammar that forces the calls' JSON.
ParseResult<std::shared_ptr<const structured::Grammar>> forced_tools_grammar(
    const ServingContext& ctx, const ToolChoice& choice, const nlohmann::json& tools,
    bool parallel);

// The response-level settings both generation endpoints take from the shared fields.
SessionSpec session_spec(StreamKind kind, const std::string& model, const SamplingFields& s);

// Logs the fields a request carried that Kestrel reads nothing from.
void log_unread(const UnreadFields& fields, const std::string& request_id);

}  // namespace kestrel::server
