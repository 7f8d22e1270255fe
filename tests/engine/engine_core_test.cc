// EngineCore on the tiny fixture checkpoints: greedy runs match the transformers reference
// (tests/fixtures/models/*/golden.json) however the engine batches, chunks, caches or preempts
// them; aborts free everything; stop ids and min_tokens end generation where they should; sampled
// tokens' logprobs and top alternatives equal the log-softmax of the reference logits.
#include "engine/engine_core.h"
#include "engine/engine_runs.h"
#include "engine/request_names.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "base/mmap_file.h"
#include "formats/safetensors.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "runner/logprobs_reference.h"
#include "test_paths.h"

namespace kestrel {
namespace {

struct Golden {
  std::vector<std::vector<int32_t>> prompts, greedy;
};

Golden read_golden(const std::string& dir) {
  Golden g;
  auto text = read_text_file(dir + "/golden.json");
  EXPECT_TRUE(text.ok());
  if (!text.ok()) return g;
  auto j = nlohmann::json::parse(*text);
  g.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  g.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
  return g;
}

std::vector<int32_t> eos_ids(const LoadedModel& lm) {
  return std::vector<int32_t>(lm.generation.eos_token_ids.begin(),
                              lm.generation.eos_token_ids.end());
}

EngineRequest greedy_request(const std::string& id, const std::vector<int32_t>& prompt,
                             int64_t max_tokens) {
  return test::greedy_core_request(id, prompt, max_tokens);
}

struct Result {
  std::vector<int32_t> tokens;
  std::string finish_reason;
  int64_t num_cached_tokens = 0;
  int32_t stop_token_id = -1;
};

// Steps until nothing is left, collecting every request's tokens and checking the outputs'
// bookkeeping on the way.
std::map<std::string, Result> run_to_completion(EngineCore& engine) {
  std::map<std::string, Result> results;
  for (int steps = 0; engine.has_unfinished(); ++steps) {
    EXPECT_LT(steps, 10000) << "engine does not finish";
    if (steps >= 10000) break;
    auto outs = engine.step();
    EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
    if (!outs.ok()) break;
    for (const EngineCoreOutput& o : *outs) {
      Result& r = results[test::name_of(o.id)];
      EXPECT_TRUE(r.finish_reason.empty()) << test::name_of(o.id) << " output after finishing";
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      EXPECT_EQ(o.num_output_tokens, int64_t(r.tokens.size())) << test::name_of(o.id);
      r.num_cached_tokens = o.num_cached_tokens;
      if (o.finish_reason) r.finish_reason = finish_reason_name(*o.finish_reason);
      if (o.stop_token_id) r.stop_token_id = *o.stop_token_id;
    }
  }
  return results;
}

// Nothing outlives the requests: no runner state, no scheduler entries, no used blocks.
void expect_drained(const EngineCore& engine) {
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(test::worker_requests(engine), 0u);
  EXPECT_EQ(engine.scheduler().kv().num_requests(), 0u);
  EXPECT_EQ(engine.scheduler().kv().usage(), 0.0);
}

class EngineGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = test::fixtures_dir() + "/models/" + GetParam();
    LoadOptions o;
    o.model = dir_;
    o.threads = 2;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    lm_ = std::move(*m);
    golden_ = read_golden(dir_);
    ASSERT_EQ(golden_.prompts.size(), 3u);
  }

  // transformers' logits at every position of golden prompt p (golden.safetensors), [len, vocab].
  std::vector<float> golden_logits(size_t p) const {
    auto st = SafetensorsFile::open(dir_ + "/golden.safetensors");
    EXPECT_TRUE(st.ok()) << st.error().message;
    if (!st.ok()) return {};
    auto t = (*st)->tensor("logits." + std::to_string(p));
    EXPECT_TRUE(t.ok()) << t.error().message;
    if (!t.ok()) return {};
    return std::vector<float>(t->as<float>(), t->as<float>() + t->numel());
  }

  SchedulerConfig config() const {
    SchedulerConfig c;
    c.block_size = 16;
    c.num_blocks = 64;
    c.max_model_len = 256;
    return c;
  }

  // The smallest pool that holds one request of max_model_len: the golden prompts (7, 19 and 40
  // tokens) with 16 outputs each cannot all fit, so requests get preempted as they grow.
  SchedulerConfig tight_config(int64_t max_model_len, int64_t budget) const {
    SchedulerConfig c = config();
    c.max_model_len = max_model_len;
    c.max_num_batched_tokens = budget;
    c.kv_groups = lm_->model->kv_cache_layout(c.block_size).groups;
    c.num_blocks =
        1 + int32_t(max_blocks_per_request(c.kv_groups, c.max_model_len, c.max_num_batched_tokens));
    return c;
  }

  // Runs the golden prompts (all in one engine) and checks the greedy tokens and finish reasons.
  void expect_golden(EngineCore& engine, const std::string& tag) {
    for (size_t p = 0; p < 3; ++p) {
      auto st = engine.add_request(greedy_request(tag + std::to_string(p), golden_.prompts[p],
                                                  int64_t(golden_.greedy[p].size())));
      ASSERT_TRUE(st.ok()) << st.error().message;
    }
    auto results = run_to_completion(engine);
    for (size_t p = 0; p < 3; ++p) {
      const Result& r = results[tag + std::to_string(p)];
      EXPECT_EQ(r.tokens, golden_.greedy[p]) << tag << " prompt " << p;
      EXPECT_EQ(r.finish_reason, "length");
    }
    expect_drained(engine);
  }

  std::string dir_;
  std::unique_ptr<LoadedModel> lm_;
  Golden golden_;
};

// Preemption needs requests whose cache grows as they run: models with a full-attention layer
// (a request of sliding-window layers only keeps a constant number of blocks once admitted).
class EngineGoldenPreemption : public EngineGolden {};

TEST_P(EngineGolden, EachPromptAloneMatchesReference) {
  for (size_t p = 0; p < 3; ++p) {
    const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
    EngineCore& engine = *engine_core;
    ASSERT_TRUE(
        engine
            .add_request(greedy_request("r", golden_.prompts[p], int64_t(golden_.greedy[p].size())))
            .ok());
    auto results = run_to_completion(engine);
    EXPECT_EQ(results["r"].tokens, golden_.greedy[p]) << "prompt " << p;
    EXPECT_EQ(results["r"].finish_reason, "length");
    expect_drained(engine);
  }
}

TEST_P(EngineGolden, BatchedChunkedAndCachedRunsMatchReference) {
  const auto batched_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& batched = *batched_core;
  expect_golden(batched, "a");

  SchedulerConfig small = config();
  small.max_num_batched_tokens = 8;  // every prompt is prefilled in chunks
  const auto chunked_core = build_local_core(*lm_->model, small, eos_ids(*lm_));
  EngineCore& chunked = *chunked_core;
  expect_golden(chunked, "b");
}

TEST_P(EngineGolden, WarmPrefixCacheGivesSameTokens) {
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  expect_golden(engine, "first");
  for (size_t p = 0; p < 3; ++p)
    ASSERT_TRUE(engine
                    .add_request(greedy_request("again" + std::to_string(p), golden_.prompts[p],
                                                int64_t(golden_.greedy[p].size())))
                    .ok());
  auto results = run_to_completion(engine);
  for (size_t p = 0; p < 3; ++p) {
    const Result& r = results["again" + std::to_string(p)];
    EXPECT_EQ(r.tokens, golden_.greedy[p]) << "prompt " << p;
    // Every full block of the prompt was cached by the first round.
    EXPECT_EQ(r.num_cached_tokens, int64_t((golden_.prompts[p].size() - 1) / 16 * 16))
        << "prompt " << p;
  }
  EXPECT_GT(results["again2"].num_cached_tokens, 0);
  expect_drained(engine);
}

TEST_P(EngineGoldenPreemption, PreemptionByRecomputeGivesSameTokens) {
  SchedulerConfig tight = tight_config(64, 16);
  tight.enable_prefix_caching = false;
  ASSERT_TRUE(validate(tight).ok()) << validate(tight).error().message;
  const auto engine_core = build_local_core(*lm_->model, tight, eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  for (size_t p = 0; p < 3; ++p)
    ASSERT_TRUE(engine
                    .add_request(greedy_request(std::to_string(p), golden_.prompts[p],
                                                int64_t(golden_.greedy[p].size())))
                    .ok());
  std::map<std::string, Result> results;
  int preemptions = 0;
  for (int steps = 0; engine.has_unfinished() && steps < 1000; ++steps) {
    auto outs = engine.step();
    ASSERT_TRUE(outs.ok()) << outs.error().message;
    for (const EngineCoreOutput& o : *outs)
      results[test::name_of(o.id)].tokens.insert(results[test::name_of(o.id)].tokens.end(),
                                                 o.new_token_ids.begin(), o.new_token_ids.end());
    for (const Request* r : engine.scheduler().waiting())
      if (r->num_output_tokens() > 0) ++preemptions;
  }
  EXPECT_GT(preemptions, 0) << "the pool was meant to force preemption";
  for (size_t p = 0; p < 3; ++p)
    EXPECT_EQ(results[std::to_string(p)].tokens, golden_.greedy[p]) << "prompt " << p;
  expect_drained(engine);
}

TEST_P(EngineGolden, AbortMidGenerationFreesEverything) {
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  for (size_t p = 0; p < 3; ++p)
    ASSERT_TRUE(engine.add_request(greedy_request(std::to_string(p), golden_.prompts[p], 16)).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(engine.step().ok());
  EXPECT_GT(engine.scheduler().kv().usage(), 0.0);
  engine.abort(test::handle("1"));
  engine.abort(test::handle("1"));  // twice is harmless
  engine.abort(test::handle("unknown"));
  auto outs = engine.step();
  ASSERT_TRUE(outs.ok());
  int aborted = 0;
  for (const EngineCoreOutput& o : *outs) {
    if (test::name_of(o.id) != "1") continue;
    ++aborted;
    ASSERT_TRUE(o.finish_reason.has_value());
    EXPECT_EQ(*o.finish_reason, FinishReason::kAbort);
    EXPECT_TRUE(o.new_token_ids.empty());
  }
  EXPECT_EQ(aborted, 1);
  engine.abort(test::handle("0"));
  engine.abort(test::handle("2"));
  auto last = engine.step();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->size(), 2u);
  expect_drained(engine);
  EXPECT_EQ(engine.scheduler().kv().pool().num_free(), config().num_blocks - 1);
  EXPECT_EQ(engine.scheduler().kv().pool().check_invariants(), "");
}

TEST_P(EngineGolden, StopTokenIdsEndGeneration) {
  const auto& want = golden_.greedy[0];
  // Stops at the first occurrence of the 4th greedy token; the stop token is part of the output.
  const int32_t stop = want[3];
  const size_t first = size_t(std::find(want.begin(), want.end(), stop) - want.begin());
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  EngineRequest r = greedy_request("s", golden_.prompts[0], 16);
  r.stop_token_ids = {stop};
  ASSERT_TRUE(engine.add_request(r).ok());
  auto results = run_to_completion(engine);
  EXPECT_EQ(results["s"].tokens, std::vector<int32_t>(want.begin(), want.begin() + first + 1));
  EXPECT_EQ(results["s"].finish_reason, "stop");
  EXPECT_EQ(results["s"].stop_token_id, stop);
  expect_drained(engine);
}

TEST_P(EngineGolden, EosStopsUnlessIgnored) {
  const auto& want = golden_.greedy[1];
  // Treat the 3rd greedy token as the model's EOS.
  const int32_t eos = want[2];
  const size_t first = size_t(std::find(want.begin(), want.end(), eos) - want.begin());
  const auto engine_core = build_local_core(*lm_->model, config(), {eos});
  EngineCore& engine = *engine_core;
  EngineRequest stops = greedy_request("eos", golden_.prompts[1], 16);
  stops.ignore_eos = false;
  ASSERT_TRUE(engine.add_request(stops).ok());
  ASSERT_TRUE(engine.add_request(greedy_request("ignore", golden_.prompts[1], 16)).ok());
  auto results = run_to_completion(engine);
  EXPECT_EQ(results["eos"].tokens, std::vector<int32_t>(want.begin(), want.begin() + first + 1));
  EXPECT_EQ(results["eos"].finish_reason, "stop");
  EXPECT_EQ(results["eos"].stop_token_id, -1) << "EOS reports no stop_reason";
  EXPECT_EQ(results["ignore"].tokens, want);
  EXPECT_EQ(results["ignore"].finish_reason, "length");
  expect_drained(engine);
}

TEST_P(EngineGolden, MinTokensSuppressesStopTokens) {
  const auto& want = golden_.greedy[0];
  const int32_t stop = want[0];
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  // Without min_tokens the very first token stops the request.
  EngineRequest plain = greedy_request("plain", golden_.prompts[0], 16);
  plain.stop_token_ids = {stop};
  EngineRequest held = plain;
  held.id = test::handle("held");
  held.min_tokens = 4;
  ASSERT_TRUE(engine.add_request(plain).ok());
  ASSERT_TRUE(engine.add_request(held).ok());
  auto results = run_to_completion(engine);
  EXPECT_EQ(results["plain"].tokens, std::vector<int32_t>{stop});
  EXPECT_EQ(results["plain"].finish_reason, "stop");
  const auto& held_tokens = results["held"].tokens;
  ASSERT_GE(held_tokens.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(held_tokens[i], stop) << "output " << i;
  // The first output differs from greedy only because the stop token was masked out.
  EXPECT_NE(held_tokens[0], want[0]);
  if (results["held"].finish_reason == "stop") {
    EXPECT_EQ(held_tokens.back(), stop);
  } else {
    EXPECT_EQ(results["held"].finish_reason, "length");
    EXPECT_EQ(held_tokens.size(), 16u);
  }
  expect_drained(engine);
}

TEST_P(EngineGolden, LogprobsOnlyWhenAskedWithTopAlternatives) {
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  EngineRequest with = greedy_request("with", golden_.prompts[0], 5);
  with.sampling.logprobs = 3;
  ASSERT_TRUE(engine.add_request(with).ok());
  ASSERT_TRUE(engine.add_request(greedy_request("without", golden_.prompts[0], 5)).ok());
  std::vector<TokenLogprobs> scored;
  while (engine.has_unfinished()) {
    auto outs = engine.step();
    ASSERT_TRUE(outs.ok());
    for (const EngineCoreOutput& o : *outs) {
      if (test::name_of(o.id) == "without") {
        EXPECT_TRUE(o.new_logprobs.empty());
        continue;
      }
      ASSERT_EQ(o.new_logprobs.size(), o.new_token_ids.size());
      EXPECT_EQ(o.new_logprobs[0].token, o.new_token_ids[0]);
      scored.insert(scored.end(), o.new_logprobs.begin(), o.new_logprobs.end());
    }
  }
  ASSERT_EQ(scored.size(), 5u);
  // The first token against transformers' logits at the last prompt position. The goldens hold no
  // logits past the prompt, so the later ones are checked against Kestrel's own single forward
  // over the prompt and the tokens so far (which model_golden_test holds to transformers'
  // logits): decode steps and the engine's batching must not change what is reported.
  const int64_t V = lm_->config.vocab_size;
  const std::vector<int32_t>& prompt = golden_.prompts[0];
  const std::vector<float> golden = golden_logits(0);
  ASSERT_EQ(golden.size(), prompt.size() * size_t(V));
  std::vector<int32_t> seq = prompt;
  for (size_t i = 0; i + 1 < scored.size(); ++i) seq.push_back(scored[i].token);
  const int groups = int(lm_->model->kv_cache_layout(16).groups.size());
  KVCacheStorage kv = lm_->model->make_kv_cache(2 * groups, 16);
  std::vector<std::vector<int32_t>> tables;  // two blocks of each group's own
  for (int g = 0; g < groups; ++g) tables.push_back({2 * g, 2 * g + 1});
  BatchBuilder bb(16, groups);
  bb.add(seq, 0, tables, seq.size());
  std::vector<float> forward(seq.size() * size_t(V));
  lm_->model->forward(bb.batch(), kv, forward.data());
  for (size_t i = 0; i < scored.size(); ++i) {
    ASSERT_EQ(scored[i].top.size(), 3u) << "output " << i;
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(scored[i].top[0].token, scored[i].token) << "output " << i;
    EXPECT_FLOAT_EQ(scored[i].top[0].logprob, scored[i].logprob) << "output " << i;
    const size_t row = prompt.size() - 1 + i;
    test::expect_logprobs_match(scored[i], (i == 0 ? golden.data() : forward.data()) + row * V, V,
                                3, test::Rank::kNone, test::kF32LogitsRelTol,
                                "output " + std::to_string(i));
  }
}

// The first sampled token of every prefix of the longest golden prompt (and of the two other
// prompts), all in one engine: its logprob, rank and top-5 alternatives (ids and values) equal
// the log-softmax of transformers' logits at the prefix's last position, with near-ties allowed
// in either order.
TEST_P(EngineGolden, SampleLogprobsMatchTheReferenceLogits) {
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  const std::vector<int32_t>& longest = golden_.prompts[2];
  struct Ref {
    size_t prompt, row;
  };
  std::map<std::string, Ref> refs;
  for (size_t k = 1; k <= longest.size(); ++k) {
    EngineRequest r = greedy_request("prefix" + std::to_string(k),
                                     std::vector<int32_t>(longest.begin(), longest.begin() + k), 1);
    r.sampling.logprobs = 5;
    ASSERT_TRUE(engine.add_request(r).ok());
    refs[test::name_of(r.id)] = {2, k - 1};
  }
  for (size_t p = 0; p < 2; ++p) {
    EngineRequest r = greedy_request("prompt" + std::to_string(p), golden_.prompts[p], 1);
    r.sampling.logprobs = 5;
    ASSERT_TRUE(engine.add_request(r).ok());
    refs[test::name_of(r.id)] = {p, golden_.prompts[p].size() - 1};
  }
  const std::vector<float> golden[3] = {golden_logits(0), golden_logits(1), golden_logits(2)};
  const int64_t V = lm_->config.vocab_size;
  std::map<std::string, int> checked;
  for (int steps = 0; engine.has_unfinished() && steps < 1000; ++steps) {
    auto outs = engine.step();
    ASSERT_TRUE(outs.ok()) << outs.error().message;
    for (const EngineCoreOutput& o : *outs) {
      ASSERT_EQ(o.new_logprobs.size(), o.new_token_ids.size()) << test::name_of(o.id);
      for (const TokenLogprobs& lp : o.new_logprobs) {
        const Ref& ref = refs.at(test::name_of(o.id));
        ASSERT_EQ(golden[ref.prompt].size(), golden_.prompts[ref.prompt].size() * size_t(V));
        test::expect_logprobs_match(lp, golden[ref.prompt].data() + ref.row * V, V, 5,
                                    test::Rank::kNone, test::kF32LogitsRelTol, test::name_of(o.id));
        ++checked[test::name_of(o.id)];
      }
    }
  }
  EXPECT_EQ(checked.size(), refs.size());
  for (const auto& [id, n] : checked) EXPECT_EQ(n, 1) << id;
  expect_drained(engine);
}

// Prompt logprobs arrive once per prompt token, in order, however the prompt is chunked, cached
// or recomputed after preemption, and requests that ask for them never start from cached blocks.
TEST_P(EngineGoldenPreemption, PromptLogprobsOncePerTokenUnderChunkingAndPreemption) {
  auto collect = [&](SchedulerConfig c, const std::string& tag) {
    const auto engine_core = build_local_core(*lm_->model, c, eos_ids(*lm_));
    EngineCore& engine = *engine_core;
    for (int round = 0; round < 2; ++round) {
      for (size_t p = 0; p < 3; ++p) {
        EngineRequest r = greedy_request(tag + std::to_string(round) + "-" + std::to_string(p),
                                         golden_.prompts[p], 16);
        r.prompt_logprobs = 1;
        EXPECT_TRUE(engine.add_request(r).ok());
      }
    }
    std::map<std::string, std::vector<TokenLogprobs>> scored;
    std::map<std::string, int64_t> cached;
    int preempted_steps = 0;
    for (int steps = 0; engine.has_unfinished() && steps < 2000; ++steps) {
      auto outs = engine.step();
      EXPECT_TRUE(outs.ok());
      if (!outs.ok()) break;
      for (EngineCoreOutput& o : *outs) {
        auto& v = scored[test::name_of(o.id)];
        v.insert(v.end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
        cached[test::name_of(o.id)] = o.num_cached_tokens;
      }
      for (const Request* r : engine.scheduler().waiting())
        if (r->num_output_tokens() > 0) ++preempted_steps;
    }
    for (const auto& [id, c] : cached) EXPECT_EQ(c, 0) << id << " read the prefix cache";
    return std::make_pair(scored, preempted_steps);
  };
  const auto [plain, none] = collect(config(), "plain");
  const SchedulerConfig tight = tight_config(64, 8);
  const auto [squeezed, preempted] = collect(tight, "tight");
  EXPECT_GT(preempted, 0) << "the small pool was meant to force preemption";
  for (int round = 0; round < 2; ++round) {
    for (size_t p = 0; p < 3; ++p) {
      const std::string suffix = std::to_string(round) + "-" + std::to_string(p);
      const auto& a = plain.at("plain" + suffix);
      const auto& b = squeezed.at("tight" + suffix);
      ASSERT_EQ(a.size(), golden_.prompts[p].size() - 1) << suffix;
      ASSERT_EQ(b.size(), a.size()) << suffix;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].token, golden_.prompts[p][i + 1]);
        EXPECT_EQ(b[i].token, a[i].token);
        EXPECT_NEAR(b[i].logprob, a[i].logprob, 1e-5) << suffix << " position " << i;
        EXPECT_EQ(b[i].rank, a[i].rank);
        EXPECT_EQ(a[i].top.size(), 1u);
      }
    }
  }
}

TEST_P(EngineGolden, RejectsBadRequests) {
  const auto engine_core = build_local_core(*lm_->model, config(), eos_ids(*lm_));
  EngineCore& engine = *engine_core;
  EngineRequest r = greedy_request("x", golden_.prompts[0], 4);
  r.min_tokens = 5;
  EXPECT_FALSE(engine.add_request(r).ok());
  EXPECT_FALSE(engine.add_request(greedy_request("y", {}, 4)).ok());
  ASSERT_TRUE(engine.add_request(greedy_request("z", golden_.prompts[0], 4)).ok());
  EXPECT_FALSE(engine.add_request(greedy_request("z", golden_.prompts[0], 4)).ok());
  run_to_completion(engine);
  expect_drained(engine);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineGolden,
                         ::testing::Values("llama3_f32", "qwen3_f32", "mistral_f32",
                                           "qwen2_sliding_f32", "gemma3_f32", "deepseek_v32_f32",
                                           "deepseek_v4_window_f32"),
                         [](const auto& info) { return info.param; });
// Not the window-only models (Mistral, DeepSeek-V4's window fixture): a request holds only its
// window's blocks, so this suite's tight pool never runs out and nothing is preempted.
INSTANTIATE_TEST_SUITE_P(Fixtures, EngineGoldenPreemption,
                         ::testing::Values("llama3_f32", "qwen3_f32", "qwen2_sliding_f32",
                                           "gemma3_f32", "deepseek_v32_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kestrel
