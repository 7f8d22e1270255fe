// engine/protocol.h — the engine as its callers see it, in plain structs: the request a caller
// submits (EngineRequest inside a GenerateRequest), what comes back on its stream
// (RequestOutput), the counters of a rank (EngineStats), and the KV transfer fields of
// prefill/decode disaggregation (KvTransferParams in, KvTransferResult out). Nothing here knows
// models, workers or JSON: the server turns requests' JSON into these and these into responses.
#pragma once

#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/request_table.h"
#include "base/status.h"
#include "engine/spec_decode_stats.h"
#include "engine/token_constraint.h"
#include "kvx/lease_stats.h"
#include "sampling/sampling_params.h"

namespace kestrel {

// ---- Prefill/decode disaggregation (issue 21) ----

// Where a prompt's KV waits on a producer, as a consumer reads it from the params.
struct RemotePrefillParams {
  std::string engine_id;
  std::string request_id;  // the producer's
  std::string host;
  int port = 0;
  int tp_size = 1;
  int block_size = 0;
  std::vector<int64_t> block_ids;  // group 0, token order
  int64_t num_prompt_tokens = -1;  // -1: not given
  int32_t state_slot = -1;         // a linear-attention model's held state (-1: none)
  uint64_t lease = 0, epoch = 0;
  std::chrono::milliseconds lease_duration{0};
};

struct KvTransferParams {
  bool do_remote_decode = false;  // a producer's request: hold the prompt's KV for a consumer
  std::optional<RemotePrefillParams> remote_prefill;  // a consumer's request
};

// What a producer's response says of a request whose KV it now holds (its kv_transfer_params),
// and what the proxy hands a decode instance. request_id is the producer's API id.
struct KvTransferResult {
  std::string engine_id, request_id, host;
  int port = 0, tp_size = 1, block_size = 0;
  std::vector<std::vector<int64_t>> block_ids;  // per group
  int64_t num_prompt_tokens = 0;
  int32_t last_token_id = -1;
  int32_t state_slot = -1;  // -1: none
  uint64_t lease = 0, epoch = 0;
  std::chrono::milliseconds lease_duration{0};
};
// The params a decode instance gets for a prompt `held` on a producer (what the proxy forwards).
KvTransferParams remote_prefill_of(const KvTransferResult& held);

// ---- Requests ----

struct EngineRequest {
  RequestHandle id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling;  // sampling.logprobs >= 0 asks for per-token logprobs
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // stop tokens are suppressed until this many outputs exist
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  uint64_t seed = 0;
  // -1: none; N >= 0: every prompt token after the first scored with the top N alternatives
  // (such requests never read the prefix cache).
  int prompt_logprobs = -1;
  // Structured output: limits which tokens may be sampled (engine thread only).
  std::shared_ptr<TokenConstraint> constraint;
  LogitsRules logits_rules;  // applied to each sampled row before the constraint
  // Mixed into the request's block hashes (a hashed cache_salt): prefix-cache isolation.
  std::vector<uint64_t> cache_keys;
  // Prefill/decode disaggregation (engine/kv_connector.h); ignored without a connector.
  KvTransferParams kv_transfer;
};

enum class FinishReason { kStop, kLength, kAbort, kError };
// Whether a prompt of `prompt_len` tokens leaves room for `max_tokens` outputs within
// `max_model_len` (vLLM's rule; the engine itself asks room for one output, the server for the
// request's max_tokens).
inline bool fits_context(int64_t prompt_len, int64_t max_tokens, int64_t max_model_len) {
  return prompt_len < max_model_len && max_tokens <= max_model_len - prompt_len;
}

// max_tokens at least 1 and min_tokens within [0, max_tokens]; the error names request `id`.
Status check_output_limits(const EngineRequest& request, const std::string& id);

// The OpenAI spelling: "stop", "length", "abort", "error".
const char* finish_reason_name(FinishReason reason);

struct EngineCoreOutput {
  RequestHandle id;
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprobs> new_logprobs;  // one per new token if the request asked for them
  // Prompt tokens scored since the previous output (prompt positions 1, 2, …, in order).
  std::vector<TokenLogprobs> prompt_logprobs;
  std::optional<FinishReason> finish_reason;
  std::string error;  // with FinishReason::kError: what went wrong for this request
  // With FinishReason::kError: the request itself cannot be served (its constraints exclude
  // every token), as opposed to a failure of the engine.
  bool invalid_request = false;
  // Set when one of the request's own stop_token_ids (not an EOS id) ended it, as vLLM's
  // stop_reason reports it.
  std::optional<int32_t> stop_token_id;
  // A PD decode instance gave the request back for want of KV blocks (finish_reason stop,
  // stop_reason "recomputed": the proxy continues it elsewhere).
  bool given_back = false;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  int64_t num_output_tokens = 0;
  // When the request was first scheduled (queue time = this − arrival); unset before that.
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;
  // A prefill for a remote decode, finished: where its KV waits (the response's
  // kv_transfer_params).
  std::optional<KvTransferResult> kv_transfer;
  bool finished() const { return finish_reason.has_value(); }
};

// Work done since start-up, for stats and benchmarks.
struct EngineCoreCounters {
  int64_t steps = 0;                   // steps that ran the model
  int64_t scheduled_tokens = 0;        // tokens through the model (vllm:iteration_tokens_total)
  int64_t prompt_tokens_computed = 0;  // of those, prompt positions (prefix hits excluded)
  int64_t generation_tokens = 0;       // tokens sampled
  SpecDecodeStats spec_decode;         // drafts verified and accepted (vllm:spec_decode_*)
};

// How a request's text is produced.
struct OutputOptions {
  std::vector<std::string> stop;  // stop strings; the first match ends the request
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool detokenize = true;  // false: token ids only (benchmarks, token-id clients)
};

// vLLM's stop_reason: the matched stop string, or the request's own stop token id.
using StopReason = std::variant<std::monostate, std::string, int32_t>;

// One request's output since the previous one (the stream it arrives on names the request).
struct RequestOutput {
  std::vector<int32_t> token_ids;  // new since the previous output
  std::string text;                // new text since the previous output
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;  // prompt tokens 1, 2, … scored since the last output
  std::optional<FinishReason> finish_reason;
  StopReason stop_reason;
  std::string error;             // set with FinishReason::kError
  bool invalid_request = false;  // with kError: the request's own rules, not the engine, failed
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  int64_t num_output_tokens = 0;
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;
  int engine_index = 0;  // the data-parallel rank that runs the request (metrics' engine label)
  // A prefill for a remote decode: where its KV waits (the response's kv_transfer_params).
  std::optional<KvTransferResult> kv_transfer;
  bool finished() const { return finish_reason.has_value(); }

  // Folds a later output into this one (a slow reader sees one merged delta).
  void merge(RequestOutput&& later);
};

// A request as the server submits it: `id` is the API's request id (unique among live requests);
// engine.id is left to the client, which assigns the request's handle.
struct GenerateRequest {
  std::string id;
  EngineRequest engine;
  OutputOptions output;
};

// ---- Counters ----

// The bounds of the transfer-time histogram's buckets, in seconds.
inline constexpr double kKvLoadSecondsBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                   0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};

// Counters for /metrics (cumulative, but for the gauges `pending` and `leases.active`).
struct KvTransferStats {
  bool enabled = false;       // this rank has a connector
  int64_t pending = 0;        // requests whose load is not decided yet
  int64_t loads = 0;          // loads decided good
  int64_t load_failures = 0;  // loads that failed or whose lease had lapsed
  int64_t recomputes = 0;     // of those, requests that prefilled locally instead
  int64_t bytes_loaded = 0;
  int64_t ucx_bytes_loaded = 0;  // of those, read over UCX
  int64_t blocks_loaded = 0;
  // Good loads' transfer times: counts at or below each bound of kKvLoadSecondsBuckets, the
  // sum (their count is `loads`).
  std::vector<int64_t> load_seconds_buckets =
      std::vector<int64_t>(std::size(kKvLoadSecondsBuckets), 0);
  double load_seconds_sum = 0;
  LeaseStats leases;  // the producer's
  // Linear-attention models: checkpoint slots holding states for transfers (the engine client
  // fills it in from the scheduler).
  int64_t state_slots_held = 0;
};

// Counters for logs, metrics and benchmarks; a snapshot after the latest step.
struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0.0;  // fraction of usable blocks in use
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t num_preemptions = 0;
  EngineCoreCounters counters;
  int64_t num_speculative_tokens = 0;  // k; 0 without speculative decoding
  bool dead = false;                   // a step failed; the engine accepts nothing more
  int engine_index = 0;                // its data-parallel rank (per-rank stats)
  KvTransferStats kv;                  // prefill/decode disaggregation (zeros without it)
};

}  // namespace kestrel
