// sched/runner_output.h — what the worker returns for one SchedulerOutput: the tokens each
// request sampled (one, or one more than the drafts it accepted), their logprobs, the prompt
// tokens it scored, and the requests it could not sample for. Plain data with a msgpack
// encoding (sched/contract_codec.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/scheduler_output.h"

namespace kestrel {

struct RequestSamples {
  RequestHandle id;
  // In order: the accepted draft tokens, then the one sampled after them.
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // one per token when the request asked for them
  // Speculative tokens proposed to follow `tokens`, for the request's next step (none without
  // a proposer, or when it had none).
  std::vector<int32_t> draft_token_ids;
  bool operator==(const RequestSamples&) const = default;
};

// A request due a token that got none: its masks left no token allowed (no_token_allowed), or
// something else failed for it alone (`error`).
struct RequestFailure {
  RequestHandle id;
  bool no_token_allowed = false;
  std::string error;
  bool operator==(const RequestFailure&) const = default;
};

// A KV load (SchedulerOutput::kv_loads) this worker finished: the local blocks are written (or
// failed to be) and no longer in use by the transfer.
struct KvLoadResult {
  uint64_t load_id = 0;
  bool ok = false;
  std::string error;
  int64_t bytes = 0;
  int64_t ucx_bytes = 0;  // of those, read over UCX
  bool operator==(const KvLoadResult&) const = default;
};

struct RunnerOutput {
  std::vector<RequestSamples> sampled;
  // Per request that asked for prompt logprobs: one entry per prompt token this step scored
  // (the token at position p + 1 under the logits of position p), in prompt order.
  std::vector<std::pair<RequestHandle, std::vector<TokenLogprobs>>> prompt_logprobs;
  std::vector<RequestFailure> failures;
  // Loads this worker finished since its previous step. Ranks finish them at different steps;
  // a multi-rank executor reports a load once every rank has (engine/multiproc_executor.h).
  std::vector<KvLoadResult> kv_loads;
  bool operator==(const RunnerOutput&) const = default;
};

}  // namespace kestrel
