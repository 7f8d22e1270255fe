// Test driver: the real Scheduler feeding a ModelRunner through the plain-data contract only
// (SchedulerOutput in, RunnerOutput back), as an executor would, with an optional draft
// proposer consulted before every step.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/loader.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "test_paths.h"

namespace kestrel::test {

inline std::unique_ptr<LoadedModel> load_llama_fixture() {
  LoadOptions o;
  o.model = fixtures_dir() + "/models/llama3_f32";
  o.threads = 2;
  auto m = load_model(o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

inline RequestSpec sampled_spec(RequestHandle id, std::vector<int32_t> prompt, int64_t max_tokens,
                                uint64_t seed, float temperature = 1.0f) {
  RequestSpec s;
  s.id = std::move(id);
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  s.sampling.params.temperature = temperature;
  s.sampling.seed = seed;
  return s;
}

// Proposes draft tokens for a running request given its tokens so far (prompt then outputs).
using DraftProposer = std::function<std::vector<int32_t>(const Request&)>;

struct DriverRun {
  std::map<RequestHandle, std::vector<int32_t>> outputs;
  std::map<RequestHandle, std::vector<TokenLogprobs>> logprobs;
  // Per step and request: how many tokens it appended (1 + the drafts it kept).
  std::vector<size_t> tokens_per_step;
  size_t rejected_drafts = 0;
};

class RunnerDriver {
 public:
  RunnerDriver(LoadedModel& lm, const SchedulerConfig& config)
      : sched(config),
        runner(*lm.model, lm.model->make_kv_cache(config.num_blocks, config.block_size,
                                                  int32_t(config.max_num_seqs),
                                                  config.num_state_checkpoints)) {}

  // Runs every added request to its end; the runner holds none of them afterwards.
  DriverRun run(const DraftProposer& propose = nullptr) {
    DriverRun r;
    while (sched.has_unfinished() || sched.has_finished_to_send()) {
      if (propose)
        for (const Request* req : sched.running()) sched.set_draft_tokens(req->id, propose(*req));
      const SchedulerOutput out = sched.schedule();
      auto result = runner.execute(out);
      EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
      if (!result.ok()) break;
      for (const RequestSamples& s : result->sampled)
        r.logprobs[s.id].insert(r.logprobs[s.id].end(), s.logprobs.begin(), s.logprobs.end());
      for (const RequestUpdate& u : sched.update_from_output(out, *result)) {
        r.outputs[u.id].insert(r.outputs[u.id].end(), u.new_token_ids.begin(),
                               u.new_token_ids.end());
        r.tokens_per_step.push_back(u.new_token_ids.size());
        r.rejected_drafts += u.num_rejected_drafts;
        if (u.finished) sched.release(u.id);
      }
    }
    EXPECT_EQ(runner.num_requests(), 0u);
    return r;
  }

  Scheduler sched;
  ModelRunner runner;
};

}  // namespace kestrel::test
