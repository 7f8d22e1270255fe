// Helpers for engine tests that run whole requests: scheduler options, greedy requests, and
// submitting a set of prompts at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_client.h"

namespace kestrel::test {

inline EngineClient::Options engine_options(int64_t budget, bool prefix_caching,
                                            int64_t max_model_len = 2048) {
  EngineClient::Options o;
  o.scheduler.block_size = 16;
  o.scheduler.num_blocks = 1024;
  o.scheduler.max_model_len = max_model_len;
  o.scheduler.max_num_seqs = 64;
  o.scheduler.max_num_batched_tokens = budget;
  o.scheduler.enable_prefix_caching = prefix_caching;
  return o;
}

inline GenerateRequest greedy_request(const std::string& id, std::vector<int32_t> prompt,
                                      int64_t max_tokens) {
  GenerateRequest r;
  r.engine.id = id;
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

}  // namespace kestrel::test
