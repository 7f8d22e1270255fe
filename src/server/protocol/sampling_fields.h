// server/protocol/sampling_fields.h — request fields shared by /v1/completions and
// /v1/chat/completions: sampling knobs, stop conditions, streaming and bookkeeping fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/field_reader.h"
#include "server/protocol/protocol_error.h"
#include "server/protocol/structured_outputs.h"

namespace kestrel::server {

// Upper bound for logprobs / top_logprobs / prompt_logprobs (vLLM's default --max-logprobs).
inline constexpr int64_t kMaxLogprobs = 20;
// Upper bound for n (vLLM's default VLLM_MAX_N_SEQUENCES).
inline constexpr int64_t kMaxN = 16384;

struct StreamOptions {
  bool include_usage = false;
  bool continuous_usage_stats = false;
};

// `response_format`. Anything but "text" asks for structured output, which the server has to
// honour or reject; the whole object is kept for that.
struct ResponseFormat {
  std::string type = "text";  // text | json_object | json_schema | structural_tag
  nlohmann::json spec;        // the request's response_format object

  bool constrains_output() const { return type != "text"; }
};

// The seven knobs whose request value, when absent, falls back to the server's defaults
// (e.g. generation_config.json) and then to these vLLM/OpenAI defaults.
struct SamplingValues {
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 = off
  double min_p = 0.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
};

struct SamplingFields {
  // Unset = not in the request; see SamplingValues and resolve_sampling_values().
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;  // -1 in the request is normalised to 0 (off)
  std::optional<double> min_p;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> repetition_penalty;

  std::optional<int64_t> seed;  // -1 in the request means unset, as in vLLM
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // de-duplicated, request order kept
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  int64_t n = 1;
  // Completions: 16 unless given (0 only with echo). Chat: unset = up to the context window.
  std::optional<int64_t> max_tokens;
  // Number of alternatives per sampled token; unset = no logprobs. Set from completions'
  // `logprobs` or from chat's `top_logprobs` when chat's `logprobs` is true.
  std::optional<int64_t> logprobs;
  std::optional<int64_t> prompt_logprobs;

  bool stream = false;
  std::optional<StreamOptions> stream_options;
  std::optional<ResponseFormat> response_format;
  // response_format (json_object / json_schema) and structured_outputs merged.
  std::optional<OutputConstraint> constraint;
  // logit_bias as (token id, bias clamped to [-100, 100]); ids are checked against the vocabulary
  // by the server, which knows it.
  std::vector<std::pair<int64_t, double>> logit_bias;
  std::optional<std::vector<int64_t>> allowed_token_ids;  // non-empty when set
  std::vector<std::string> bad_words;
  // Keep only this many prompt tokens (-1: as many as the context allows), from the end
  // (truncation_side "left", the default) or the start ("right").
  std::optional<int64_t> truncate_prompt_tokens;
  bool truncate_left = true;
  bool return_tokens_as_token_ids = false;  // logprob tokens as "token_id:N"
  std::optional<std::string> cache_salt;    // isolates the request's prefix-cache entries
  std::optional<std::string> user;
  int64_t priority = 0;
  std::optional<std::string> request_id;
  std::optional<nlohmann::json> kv_transfer_params;  // raw object, for PD disaggregation
};

// Reads the shared fields (except max_tokens and the logprobs fields, whose names and rules
// differ per endpoint) with type checks; type errors are recorded in `reader`.
void read_sampling_fields(FieldReader& reader, SamplingFields& out);

// Range and consistency checks, as vLLM's request validators and SamplingParams do them.
// Call after the endpoint has filled max_tokens and logprobs.
std::optional<ProtocolError> validate_sampling_fields(const SamplingFields& fields);

// Request values where given, else `defaults`.
SamplingValues resolve_sampling_values(const SamplingFields& fields,
                                       const SamplingValues& defaults = {});

// Checks a logprobs-count field: 0..kMaxLogprobs.
std::optional<ProtocolError> check_logprobs_count(std::string_view key, int64_t value);

}  // namespace kestrel::server
