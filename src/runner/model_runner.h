// runner/model_runner.h — runs one scheduler step on the model: every scheduled request's new
// tokens go into one flat forward pass, and each request that reaches its last known token gets
// a token sampled with its own parameters and its own seeded generator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/sampling.h"
#include "model/batch_builder.h"
#include "model/causal_lm.h"
#include "runner/logits_rules.h"
#include "runner/token_constraint.h"
#include "sched/request.h"
#include "sched/scheduler_output.h"

namespace kestrel {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<cpu::TokenLogprob> top;  // the request's top-N alternatives, if it asked for them
};

// A token with its logprob, its rank (1 = most likely; 0 when not computed) and the top
// alternatives: sampled tokens, and prompt tokens for prompt logprobs.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<cpu::TokenLogprob> top;  // best first
};

// A request that was due a token and got none: its masks left no token (complete: its constraint
// was satisfied, so it may end with "stop"), or its constraint refused the sampled one (error).
struct EndedRequest {
  bool complete = false;
  std::string error;             // why, when not complete
  bool invalid_request = false;  // the request's own rules excluded every token
};

struct StepOutput {
  // The sampled token of every request not in a prefill chunk, unless it is in `ended`.
  std::unordered_map<RequestId, SampledToken> sampled;
  std::unordered_map<RequestId, EndedRequest> ended;
  // For requests that asked for prompt logprobs: one entry per prompt token this step scored
  // (the token at position p + 1 under the logits of position p), in prompt order.
  std::unordered_map<RequestId, std::vector<TokenLogprobs>> prompt_logprobs;
};

// How the runner reads a scheduled request's tokens (the scheduler's request(), usually).
using RequestLookup = std::function<const Request*(const RequestId&)>;

// Per-request sampling state the runner keeps between steps.
struct RunnerRequestParams {
  cpu::SamplingParams sampling;
  uint64_t seed = 0;
  // Tokens masked out while fewer than min_tokens outputs exist (stop and EOS ids).
  int64_t min_tokens = 0;
  std::vector<int32_t> min_tokens_suppressed;
  int prompt_logprobs = -1;  // -1 = none; N >= 0 = score each prompt token with the top N
  std::shared_ptr<TokenConstraint> constraint;  // structured output; null = unconstrained
  LogitsRules logits_rules;                     // logit_bias, allowed_token_ids, bad_words
};

class ModelRunner {
 public:
  // Prompt rows whose logits exist at once when a request scores its prompt (prompt_logprobs):
  // 64 × a 152k vocabulary is 39 MB, whatever --max-num-batched-tokens allows in one step.
  static constexpr int64_t kScoreChunkRows = 64;

  // `kv` must have the scheduler's num_blocks and block_size.
  ModelRunner(CausalLM& model, KVCacheStorage kv);

  // Registers a request's sampling state; it must precede the request's first scheduled step.
  void add_request(const RequestId& id, const RunnerRequestParams& params);
  // Drops a request's sampling state (finish, abort); unknown ids are ignored.
  void remove_request(const RequestId& id);
  size_t num_requests() const { return requests_.size(); }
  // Memory held for logits: the sampled rows of the largest step and one chunk of scored rows.
  size_t logits_bytes() const {
    return (logits_.capacity() + score_logits_.capacity()) * sizeof(float);
  }

  // Computes the step: sampled tokens and prompt logprobs.
  Expected<StepOutput> execute(const SchedulerOutput& output, const RequestLookup& lookup);

 private:
  struct State {
    RunnerRequestParams params;
    cpu::Rng rng;
  };

  CausalLM& model_;
  KVCacheStorage kv_;
  BatchBuilder builder_;
  std::vector<float> logits_;        // the sampled rows of a step
  std::vector<float> score_logits_;  // one chunk of prompt rows being scored
  std::vector<cpu::SampleResult> samples_;  // one per sampled request of a step
  std::unordered_map<RequestId, State> requests_;
};

}  // namespace kestrel
