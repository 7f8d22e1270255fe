// spec_decode/proposer.h — where speculative drafts come from. After each step's sampling the model
// runner hands a proposer every request the step ran; the proposer returns up to k drafts for
// each request that sampled, which travel back to the scheduler (RunnerOutput::drafts) and
// ride on that request's next step to be verified (runner/model_runner.h).
//
// Proposers with a KV cache of their own (MTP, a draft model) keep one invariant: they write
// their cache at every position the target computes, in the same step and under the same block
// ids. So the target's blocks — prefix-cache hits, a recompute after preemption — are valid for
// the proposer too. A step too large for drafts skips the draft model altogether; it catches up
// over the skipped positions when it drafts again (MTP, which needs the target's hidden states
// of a position, runs its one layer over every step). Owned by the model runner; only the
// thread that runs steps touches it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/request_table.h"
#include "base/status.h"
#include "model/causal_lm.h"
#include "spec_decode/speculative_config.h"

namespace kestrel {

// One request of the step, after its tokens were sampled.
struct ProposalInput {
  RequestHandle id;
  // Prompt and every token kept so far, this step's samples included.
  std::span<const int32_t> tokens;
  // The target's table of proposer_table_group(): blocks the proposer's cache uses too.
  std::span<const int32_t> block_table;
  int64_t start = 0;         // its first position this step
  int64_t batch_offset = 0;  // its first token in the step's flat batch
  // Positions [start, start + num_valid) ran with the tokens now in `tokens` (the known tokens
  // and the accepted drafts; rejected drafts are not among them).
  int64_t num_valid = 0;
  // It sampled this step (its last valid position predicted tokens.back()): it may get drafts.
  bool sampled = false;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // `target` has just run the step's batch (forward_hidden) and the head of its sampled rows.
  // With `draft` false (the step is too large for drafts to pay) a proposer only keeps its
  // cache; otherwise drafts[i] gets up to k drafts for each sampled input i (and stays empty for
  // the others). drafts.size() == inputs.size() on return.
  virtual void propose(std::span<const ProposalInput> inputs, CausalLM& target, bool draft,
                       std::vector<std::vector<int32_t>>& drafts) = 0;
  // k: the most drafts it returns for a request.
  virtual int64_t max_drafts() const = 0;
  // The request is gone (the runner dropped it).
  virtual void finished(RequestHandle id) { (void)id; }
};

// Speculative decoding as the model runner runs it: the proposer, and the most sampling requests
// a step may have for the proposer to draft (above it, no drafts that step). No proposer: off.
struct Speculation {
  std::unique_ptr<Proposer> proposer;
  int64_t max_drafting_requests = 0;
};

// The most sampling requests a step may have and still draft, when disable_by_batch_size is not
// given: the verify rows a step adds must stay where a decode step costs about the same as one
// row (docs/benchmarks.md, issue 19).
int64_t default_max_drafting_requests(int64_t k);

struct ProposerOptions {
  SpeculativeConfig config;  // resolved against the target (resolve_speculative_config)
  int64_t max_model_len = 0;
  int64_t num_blocks = 0;  // the target's KV pool: the proposer's cache uses the same block ids
  int block_size = 16;
  // draft_model: the loaded draft (same vocabulary as the target); null otherwise.
  CausalLM* draft_model = nullptr;
};

// The target's first KV cache group that keeps every block (not a sliding window): a proposer's
// cache is addressed by its block table. Errors when every group is a sliding window.
Expected<size_t> proposer_table_group(const KVCacheLayout& target_layout);

// Bytes per KV block of the proposer's own cache (0 for ngram), which the KV budget prices
// next to the target's.
int64_t proposer_kv_bytes_per_block(const CausalLM& target, const ProposerOptions& options);

// The proposer for `options.config.method`. Errors when the target or the draft cannot do it
// (no MTP module, a draft with another vocabulary or a shorter context, a draft whose cache is
// not one full-attention group).
Expected<std::unique_ptr<Proposer>> make_proposer(CausalLM& target, const ProposerOptions& options);

}  // namespace kestrel
