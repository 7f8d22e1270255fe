// Helpers for engine tests that run whole requests: scheduler options, greedy requests, and
// submitting a set of prompts at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_client.h"
#include "engine/engine_client_options.h"
#include "engine/engine_core.h"
#include "engine/in_process_executor.h"
#include "engine/local_engine.h"
#include "engine/request_names.h"

namespace kestrel::test {

// An in-process worker whose every step takes at least 2 ms, so requests are still running
// (or still short of a given length) when a test acts, however the test's thread is scheduled.
class SlowExecutor final : public Executor {
 public:
  SlowExecutor(CausalLM& model, const SchedulerConfig& c)
      : inner_(model, c.num_blocks, c.block_size) {}
  Expected<RunnerOutput> execute(const SchedulerOutput& output) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return inner_.execute(output);
  }

 private:
  InProcessExecutor inner_;
};

// Requests the in-process worker still holds; 0 once everything finished and the workers
// heard of it.
inline size_t worker_requests(const EngineCore& engine) {
  return static_cast<const InProcessExecutor&>(engine.executor()).runner().num_requests();
}

inline EngineClientOptions engine_options(int64_t budget, bool prefix_caching,
                                          int64_t max_model_len = 2048) {
  EngineClientOptions o;
  o.scheduler.block_size = 16;
  o.scheduler.num_blocks = 1024;
  o.scheduler.max_model_len = max_model_len;
  o.scheduler.max_num_seqs = 64;
  o.scheduler.max_num_batched_tokens = budget;
  o.scheduler.enable_prefix_caching = prefix_caching;
  return o;
}

// A greedy core request named `name` (test::handle) that ignores EOS.
inline EngineRequest greedy_core_request(const std::string& name, std::vector<int32_t> prompt,
                                         int64_t max_tokens) {
  EngineRequest r;
  r.id = handle(name);
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

inline GenerateRequest greedy_request(const std::string& id, std::vector<int32_t> prompt,
                                      int64_t max_tokens) {
  GenerateRequest r;
  r.id = id;
  r.engine.prompt_token_ids = std::move(prompt);
  r.engine.sampling.temperature = 0.0f;
  r.engine.max_tokens = max_tokens;
  r.engine.ignore_eos = true;
  r.output.detokenize = false;
  return r;
}

// Submits all prompts at once and returns each one's final output.
inline std::vector<RequestOutput> run_all(EngineClient& client,
                                          const std::vector<std::vector<int32_t>>& prompts,
                                          int64_t max_tokens, const std::string& tag) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = client.add_request(greedy_request(tag + std::to_string(i), prompts[i], max_tokens));
    EXPECT_TRUE(s.ok()) << s.error().message;
    if (s.ok()) streams.push_back(*s);
  }
  std::vector<RequestOutput> outs;
  for (auto& s : streams) {
    RequestOutput all;
    while (!all.finished()) all.merge(s->next());
    outs.push_back(std::move(all));
  }
  return outs;
}

// Greedy outputs of `prompts` are the same run one at a time, all at once, again from a warm
// prefix cache (which must hit), and all at once under a token budget of `chunk_budget`.
inline void expect_batch_invariant(CausalLM& model,
                                   const std::vector<std::vector<int32_t>>& prompts,
                                   int64_t max_tokens, int64_t max_model_len, int64_t chunk_budget,
                                   const std::string& label) {
  std::vector<std::vector<int32_t>> alone;
  {
    const auto client_owner =
        build_local_engine(model, nullptr, engine_options(2048, false, max_model_len));
    EngineClient& client = *client_owner;
    for (size_t i = 0; i < prompts.size(); ++i)
      alone.push_back(
          run_all(client, {prompts[i]}, max_tokens, "alone" + std::to_string(i))[0].token_ids);
  }
  auto expect_same = [&](const std::vector<RequestOutput>& outs, const std::string& mode) {
    ASSERT_EQ(outs.size(), prompts.size());
    for (size_t i = 0; i < outs.size(); ++i)
      EXPECT_EQ(outs[i].token_ids, alone[i]) << label << ", " << mode << ": prompt " << i;
  };
  {
    const auto client_owner =
        build_local_engine(model, nullptr, engine_options(2048, true, max_model_len));
    EngineClient& client = *client_owner;
    expect_same(run_all(client, prompts, max_tokens, "batch"),
                "batch of " + std::to_string(prompts.size()));
    // Second round: every prompt's full blocks are cached now.
    const std::vector<RequestOutput> warm = run_all(client, prompts, max_tokens, "warm");
    expect_same(warm, "warm prefix cache");
    int64_t cached = 0;
    for (const RequestOutput& o : warm) cached += o.num_cached_tokens;
    EXPECT_GT(cached, 0) << label;
  }
  {
    const auto client_owner =
        build_local_engine(model, nullptr, engine_options(chunk_budget, true, max_model_len));
    EngineClient& client = *client_owner;
    expect_same(run_all(client, prompts, max_tokens, "chunked"),
                "chunked, budget " + std::to_string(chunk_budget));
  }
}

}  // namespace kestrel::test
