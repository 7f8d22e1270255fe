// runner/model_runner.h — the worker side of a scheduler step: it applies the step's request
// deltas to its own copy of every request (runner/worker_requests.h), runs every scheduled
// request's tokens (drafts included) through one flat forward pass, and samples each request
// that reaches its last known token with one Backend::sample op: its own parameters and seeded
// generator, its drafts verified by exact match. With one draw per emitted token in order, a
// request emits the tokens decoding without drafts gives for the same seed (exact-match
// verification of a point-mass proposal is lossless). Input and output are plain data
// (SchedulerOutput → RunnerOutput), so the runner can sit behind any executor. With a proposer
// (spec_decode/proposer.h) it then proposes the drafts each sampled request verifies in its next
// step, returned with its samples; a constrained request's drafts come back with a token mask per
// position (the engine core cuts them where its grammar would not go). For models with
// linear-attention layers the scheduler owns every state slot: a scheduled request's running
// slot comes with its work (ScheduledTokens::state_slot), and the runner makes the copies the
// step lists (SchedulerOutput::state_ops) — before the forward pass (a resumed checkpoint, a
// loaded state, the previous step's boundary state saved from a snapshot), during it (a PD
// producer's state before the prompt's last token) and after it (a checkpoint at a boundary).
// Under speculative decoding the forward pass keeps the states after a request's drafts
// (KVCacheStorage's draft snapshots), and sampling restores the one after the last accepted
// token into its slot, so rejected drafts leave nothing in the recurrent state. Only the thread
// that calls execute() touches it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvx/kv_worker.h"
#include "model/batch_builder.h"
#include "model/causal_lm.h"
#include "runner/worker_requests.h"
#include "sched/runner_output.h"
#include "sched/scheduler_output.h"
#include "spec_decode/proposer.h"

namespace kestrel {

class ModelRunner {
 public:
  // Prompt rows whose logits exist at once when a request scores its prompt (prompt_logprobs):
  // 64 × a 152k vocabulary is 39 MB, whatever --max-num-batched-tokens allows in one step.
  static constexpr int64_t kScoreChunkRows = 64;

  // `kv` must have the scheduler's num_blocks and block_size.
  ModelRunner(CausalLM& model, KVCacheStorage kv, Speculation speculation = {});

  // Requests the worker holds (sent and not yet finished).
  size_t num_requests() const { return requests_.size(); }
  // Memory held for logits: the sampled rows of the largest step and one chunk of scored rows.
  size_t logits_bytes() const {
    return (logits_.capacity() + score_logits_.capacity()) * sizeof(float);
  }

  // Computes the step. An error means the step contradicts the worker's state (an unknown
  // request, tokens past what it holds, a table too short): nothing was computed then. The
  // step's KV loads start either way; loads finished meanwhile go into the next ok output.
  Expected<RunnerOutput> execute(const SchedulerOutput& output);

  // Prefill/decode disaggregation: this rank's KV server and puller (kvx/kv_worker.h), which
  // read and write its KV pool. Set once, before the first step.
  void set_kv_worker(std::unique_ptr<KvWorker> worker) { kv_worker_ = std::move(worker); }
  KVMemoryView kv_memory() const { return kv_.memory(); }
  const KvWorker* kv_worker() const { return kv_worker_.get(); }

 private:
  // execute() before the model's end of step (CausalLM::finish_step).
  Expected<RunnerOutput> run_step(const SchedulerOutput& output);
  // One scheduled request of the step, as the forward pass lays it out.
  struct Rows {
    const ScheduledTokens* work;
    WorkerRequest* req;
    int64_t start;      // its first position this step
    int64_t offset;     // its first token in the step's batch
    int64_t first_row;  // its first logits row
    int64_t count;      // its logits rows
    bool samples;       // the last drafts + 1 rows are sampled
  };

  // Checks `work` against the request's state and adds its tokens to the batch; `hold` (-1:
  // none) is the checkpoint slot that receives its state before its last token here.
  Expected<Rows> add_to_batch(const ScheduledTokens& work, int64_t offset, int64_t first_row,
                              int32_t hold);
  void score_prompt(const Rows& r, const ForwardBatch& batch, RunnerOutput& out);
  // The step's copies of one kind (`op.kind == kind`), in order; an error names a slot outside
  // the storage's.
  Status copy_states(const SchedulerOutput& output, StateOpKind kind);
  // After sampling a request that verified `num_drafts` drafts and kept `num_accepted`: its
  // state back to the last kept token (linear-attention models).
  void roll_back_state(const WorkerRequest& req, size_t num_drafts, size_t num_accepted) const;
  // Runs the proposer over the step's requests once their samples are in; `sample_of[k]` is
  // rows[k]'s entry in out.sampled (-1: it sampled nothing).
  void propose(const std::vector<Rows>& rows, const std::vector<int64_t>& sample_of,
               RunnerOutput& out);

  CausalLM& model_;
  KVCacheStorage kv_;
  BatchBuilder builder_;
  WorkerRequests requests_;
  Speculation spec_;
  size_t proposer_group_ = 0;          // the KV cache group whose tables the proposer's cache uses
  std::vector<int32_t> tokens_;        // one request's tokens of a step (known ones, then drafts)
  std::vector<float> logits_;          // the sampled rows of a step
  std::vector<float> score_logits_;    // one chunk of prompt rows being scored
  std::vector<GroupSamples> samples_;  // one per sampling request of a step
  std::vector<ProposalInput> proposal_inputs_;
  std::vector<std::vector<int32_t>> drafts_;
  // Declared after kv_: stopped (its transfers with it) before the pool it uses goes.
  std::unique_ptr<KvWorker> kv_worker_;
};

}  // namespace kestrel
