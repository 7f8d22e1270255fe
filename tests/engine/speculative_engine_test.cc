// Speculative decoding end to end in the engine core, for every proposer (n-gram, a draft model,
// the MTP modules of DeepSeek-V3, Qwen3-Next and Qwen3.5) on the fixture checkpoints, hybrid
// (linear-attention) targets included: greedy outputs are token for token the
// outputs of decoding without drafts, alone, batched, chunked, from the prefix cache, under
// preemption and when drafting turns off and on with the batch size — and drafts were really
// proposed and (where the proposer is good) accepted, with every block freed at the end.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "engine/token_constraint.h"
#include "engine_runs.h"
#include "fixture_models.h"
#include "model/loader.h"
#include "spec_decode/proposer.h"
#include "spec_decode/speculative_config.h"
#include "test_paths.h"

namespace kestrel {
namespace {

struct SpecCase {
  std::string target;
  std::string config;  // --speculative-config
  std::string draft;   // fixture of the draft model, for draft_model
  bool accepts;        // the proposer is good enough that some drafts must be accepted
  // The draft is the target itself: with batch-invariant kernels its argmax is the target's at
  // every position, so every draft must be accepted — unless its cache missed a position.
  bool self_draft = false;
};

std::ostream& operator<<(std::ostream& os, const SpecCase& c) {
  return os << c.target << " " << c.config;
}

std::unique_ptr<LoadedModel> load_fixture(const std::string& name, Backend* shared = nullptr) {
  return test::load_fixture(name, 2, shared);
}

class SpeculativeEngine : public ::testing::TestWithParam<SpecCase> {
 protected:
  void SetUp() override {
    target_ = load_fixture(GetParam().target);
    ASSERT_NE(target_, nullptr);
    if (!GetParam().draft.empty()) {
      draft_ = load_fixture(GetParam().draft, &target_->model->backend());
      ASSERT_NE(draft_, nullptr);
    }
    auto parsed = parse_speculative_config(GetParam().config);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    ASSERT_TRUE(parsed->has_value());
    spec_ = **parsed;
    if (!GetParam().draft.empty()) spec_.draft_model = GetParam().draft;
    const Status s = resolve_speculative_config(spec_, target_->model->num_mtp_modules(),
                                                target_->config.model_type);
    ASSERT_TRUE(s.ok()) << s.message();

    std::mt19937 rng(20261201);
    auto random_tokens = [&](int n) {
      std::vector<int32_t> t;
      for (int i = 0; i < n; ++i) t.push_back(std::uniform_int_distribution<int32_t>(3, 511)(rng));
      return t;
    };
    // Prompts of 5..40 tokens; three repeat a phrase, which n-gram lookup copies from.
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> p = random_tokens(5 + i * 7);
      if (i % 2 == 0) {
        const std::vector<int32_t> phrase(p.begin(), p.begin() + 5);
        for (int r = 0; r < 3; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
      }
      prompts_.push_back(std::move(p));
    }
  }

  SchedulerConfig config(int64_t budget = 512, int32_t num_blocks = 256) const {
    SchedulerConfig c;
    c.block_size = 4;  // drafts cross block boundaries
    c.num_blocks = num_blocks;
    c.max_model_len = 128;
    c.max_num_batched_tokens = budget;
    c.kv_groups = target_->model->kv_cache_layout(c.block_size).groups;
    // Hybrid targets: state checkpoints for the prefix cache, each request one slot.
    c.max_num_seqs = 8;
    c.num_state_checkpoints = 32;
    return c;
  }

  std::unique_ptr<EngineCore> engine(SchedulerConfig c, bool speculative,
                                     int64_t max_drafting = 1 << 20) const {
    Speculation s;
    if (speculative) {
      c.num_lookahead_tokens = spec_.num_lookahead_tokens();
      ProposerOptions po;
      po.config = spec_;
      po.max_model_len = c.max_model_len;
      po.num_blocks = c.num_blocks;
      po.block_size = c.block_size;
      po.draft_model = draft_ ? draft_->model.get() : nullptr;
      auto p = make_proposer(*target_->model, po);
      EXPECT_TRUE(p.ok()) << p.error().message;
      if (p.ok()) s.proposer = std::move(*p);
      s.max_drafting_requests = max_drafting;
    }
    return build_local_core(*target_->model, c, std::vector<int32_t>{}, std::move(s));
  }

  // Runs every prompt (named tag + index) to its 24 outputs and returns the tokens by name.
  std::map<std::string, std::vector<int32_t>> run(
      EngineCore& e, const std::string& tag, std::map<std::string, int64_t>* cached = nullptr) {
    for (size_t i = 0; i < prompts_.size(); ++i)
      EXPECT_TRUE(
          e.add_request(test::greedy_core_request(tag + std::to_string(i), prompts_[i], 24)).ok());
    std::map<std::string, std::vector<int32_t>> out;
    for (int steps = 0; e.has_unfinished() && steps < 5000; ++steps) {
      auto outs = e.step();
      EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        std::vector<int32_t>& t = out[test::name_of(o.id)];
        t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        EXPECT_FALSE(o.finish_reason == FinishReason::kError) << o.error;
        if (cached != nullptr) (*cached)[test::name_of(o.id)] = o.num_cached_tokens;
      }
    }
    return out;
  }

  // The same tokens as `want` (named "ref" + index) under `tag`.
  void expect_same(const std::map<std::string, std::vector<int32_t>>& got,
                   const std::map<std::string, std::vector<int32_t>>& want,
                   const std::string& tag) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
      const auto g = got.find(tag + std::to_string(i));
      ASSERT_NE(g, got.end()) << tag << i;
      EXPECT_EQ(g->second, want.at("ref" + std::to_string(i))) << tag << " prompt " << i;
      EXPECT_EQ(g->second.size(), 24u);
    }
  }

  void expect_drafted_and_drained(const EngineCore& e, const std::string& what) {
    const SpecDecodeStats& s = e.counters().spec_decode;
    EXPECT_GT(s.num_drafts, 0) << what;
    EXPECT_LE(s.num_accepted_tokens, s.num_draft_tokens) << what;
    if (GetParam().accepts) {
      EXPECT_GT(s.num_accepted_tokens, 0) << what;
    }
    if (GetParam().self_draft) {
      EXPECT_EQ(s.num_accepted_tokens, s.num_draft_tokens) << what;
    }
    EXPECT_FALSE(e.has_unfinished());
    EXPECT_EQ(test::worker_requests(e), 0u);
    EXPECT_EQ(e.scheduler().kv().num_requests(), 0u) << what;
    EXPECT_EQ(e.scheduler().kv().usage(), 0.0) << what;
  }

  std::map<std::string, std::vector<int32_t>> reference() {
    auto plain = engine(config(), false);
    auto ref = run(*plain, "ref");
    EXPECT_EQ(plain->counters().spec_decode.num_drafts, 0);
    return ref;
  }

  std::unique_ptr<LoadedModel> target_, draft_;
  SpeculativeConfig spec_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_P(SpeculativeEngine, GreedyOutputsEqualDecodingWithoutDrafts) {
  const auto ref = reference();
  {
    auto e = engine(config(), true);
    expect_same(run(*e, "batched"), ref, "batched");
    expect_drafted_and_drained(*e, "batched");
  }
  {
    auto e = engine(config(/*budget=*/8), true);  // prompts prefilled in chunks
    expect_same(run(*e, "chunked"), ref, "chunked");
    expect_drafted_and_drained(*e, "chunked");
  }
  {
    // Drafting only while at most two requests sample: a small budget admits the requests one
    // after another, so drafting is on, off while many decode, and on again as they finish.
    auto e = engine(config(/*budget=*/16), true, /*max_drafting=*/2);
    expect_same(run(*e, "toggled"), ref, "toggled");
    expect_drafted_and_drained(*e, "toggled");
  }
}

TEST_P(SpeculativeEngine, EachPromptAloneEqualsDecodingWithoutDrafts) {
  const auto ref = reference();
  auto e = engine(config(), true);
  for (size_t i = 0; i < prompts_.size(); ++i) {
    ASSERT_TRUE(
        e->add_request(test::greedy_core_request("alone" + std::to_string(i), prompts_[i], 24))
            .ok());
    std::vector<int32_t> tokens;
    while (e->has_unfinished()) {
      auto outs = e->step();
      ASSERT_TRUE(outs.ok());
      for (const EngineCoreOutput& o : *outs)
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
    EXPECT_EQ(tokens, ref.at("ref" + std::to_string(i))) << "prompt " << i;
  }
  expect_drafted_and_drained(*e, "alone");
}

TEST_P(SpeculativeEngine, PrefixCacheHitsAndPreemptionKeepTheTokens) {
  const auto ref = reference();
  {
    auto e = engine(config(), true);
    expect_same(run(*e, "first"), ref, "first");
    std::map<std::string, int64_t> cached;
    expect_same(run(*e, "again", &cached), ref, "again");
    int64_t hits = 0;
    for (const auto& [name, n] : cached) hits += n;
    EXPECT_GT(hits, 0);  // the second round read the first one's blocks
    expect_drafted_and_drained(*e, "cached");
  }
  {
    // A pool that holds about two requests with their drafts' lookahead: requests are preempted
    // and recomputed as they grow.
    SchedulerConfig c = config();
    c.num_lookahead_tokens = spec_.num_lookahead_tokens();
    c.num_blocks =
        1 + int32_t(max_blocks_per_request(c.kv_groups, c.max_model_len + c.num_lookahead_tokens,
                                           c.max_num_batched_tokens + c.num_lookahead_tokens));
    auto e = engine(c, true);
    expect_same(run(*e, "tight"), ref, "tight");
    EXPECT_GT(e->scheduler().num_preemptions(), 0);
    expect_drafted_and_drained(*e, "tight");
  }
}

// Seeded sampling (temperature, top-k/p, min-p, penalties, logit bias, min_tokens, logprobs):
// every verified position uses the request's rules, and a request draws once per emitted token
// in order, so the tokens and their logprobs are those of decoding without drafts.
TEST_P(SpeculativeEngine, SeededSamplingWithPenaltiesAndLogprobsIsUnchanged) {
  auto run_sampled = [&](EngineCore& e) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
      EngineRequest r = test::greedy_core_request("s" + std::to_string(i), prompts_[i], 24);
      r.sampling.temperature = i % 2 == 0 ? 0.2f : 0.9f;  // near-greedy runs copy more
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.95f;
      r.sampling.min_p = 0.01f;
      r.sampling.repetition_penalty = i % 2 == 0 ? 1.0f : 1.15f;
      r.sampling.presence_penalty = i % 3 == 0 ? 0.3f : 0.0f;
      r.sampling.frequency_penalty = i % 3 == 1 ? 0.2f : 0.0f;
      r.sampling.logprobs = 2;
      r.seed = 1000 + i;
      r.min_tokens = 4;
      r.stop_token_ids = {prompts_[i][0]};
      r.logits_rules.logit_bias = {{prompts_[i][1], 2.0f}};
      r.logits_rules.bad_words = {{prompts_[i][2], prompts_[i][3]}};
      EXPECT_TRUE(e.add_request(r).ok());
    }
    std::map<std::string, std::pair<std::vector<int32_t>, std::vector<TokenLogprobs>>> out;
    while (e.has_unfinished()) {
      auto outs = e.step();
      EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        auto& [tokens, logprobs] = out[test::name_of(o.id)];
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        logprobs.insert(logprobs.end(), o.new_logprobs.begin(), o.new_logprobs.end());
        EXPECT_EQ(o.new_logprobs.size(), o.new_token_ids.size());
      }
    }
    return out;
  };
  auto plain = engine(config(), false);
  const auto want = run_sampled(*plain);
  auto spec = engine(config(/*budget=*/16), true);
  EXPECT_EQ(run_sampled(*spec), want);
  EXPECT_GT(spec->counters().spec_decode.num_drafts, 0);
  EXPECT_EQ(spec->scheduler().kv().usage(), 0.0);
}

// A grammar stand-in: output j may not be ≡ j (mod 5), so drafts copied from the prompt are
// often refused part-way. save()/restore() only with `restorable`.
class ModuloConstraint final : public TokenConstraint {
 public:
  explicit ModuloConstraint(bool restorable) : restorable_(restorable) {}
  void fill_bitmask(std::vector<uint64_t>& bits) override {
    bits.assign(8, 0);  // 512 tokens
    for (int32_t t = 0; t < 512; ++t)
      if (allowed(t)) bits[size_t(t / 64)] |= uint64_t{1} << (t % 64);
  }
  bool accept(int32_t token) override {
    if (!allowed(token)) return false;
    ++count_;
    return true;
  }
  bool complete() const override { return false; }
  bool can_restore() const override { return restorable_; }
  void save() override { saved_ = count_; }
  void restore() override { count_ = saved_; }

 private:
  bool allowed(int32_t t) const { return t % 5 != count_ % 5; }
  bool restorable_;
  int64_t count_ = 0, saved_ = 0;
};

TEST_P(SpeculativeEngine, ConstrainedRequestsVerifyTheDraftsTheirGrammarAllows) {
  auto run_constrained = [&](EngineCore& e, bool restorable) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
      EngineRequest r = test::greedy_core_request("c" + std::to_string(i), prompts_[i], 24);
      r.constraint = std::make_shared<ModuloConstraint>(restorable);
      EXPECT_TRUE(e.add_request(r).ok());
    }
    std::map<std::string, std::vector<int32_t>> out;
    while (e.has_unfinished()) {
      auto outs = e.step();
      EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        EXPECT_FALSE(o.finish_reason == FinishReason::kError) << o.error;
        std::vector<int32_t>& t = out[test::name_of(o.id)];
        t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    }
    return out;
  };
  auto plain = engine(config(), false);
  const auto want = run_constrained(*plain, true);
  for (const auto& [name, tokens] : want) {
    ASSERT_EQ(tokens.size(), 24u) << name;
    for (size_t j = 0; j < tokens.size(); ++j) ASSERT_NE(tokens[j] % 5, int32_t(j % 5)) << name;
  }
  auto spec = engine(config(), true);
  EXPECT_EQ(run_constrained(*spec, true), want);
  // Drafts the grammar allows were verified (the unconstrained proposers' drafts are refused
  // often, so nothing is said of how many were accepted).
  EXPECT_GT(spec->counters().spec_decode.num_drafts, 0);
  EXPECT_EQ(spec->scheduler().kv().usage(), 0.0);
  // Without restore the constraint cannot walk drafts: none are verified, same tokens.
  auto no_restore = engine(config(), true);
  EXPECT_EQ(run_constrained(*no_restore, false), want);
  EXPECT_EQ(no_restore->counters().spec_decode.num_drafts, 0);
}

// A model whose every layer is a sliding window (its requests hold a constant number of blocks,
// so they are never preempted): n-gram drafting needs no cache of its own and runs there too.
class SpeculativeSlidingEngine : public SpeculativeEngine {};

TEST_P(SpeculativeSlidingEngine, GreedyOutputsEqualDecodingWithoutDrafts) {
  const auto ref = reference();
  for (const int64_t budget : {512, 8}) {
    auto e = engine(config(budget), true);
    expect_same(run(*e, "sliding" + std::to_string(budget)), ref,
                "sliding" + std::to_string(budget));
    expect_drafted_and_drained(*e, "sliding");
  }
}

INSTANTIATE_TEST_SUITE_P(SlidingWindowOnly, SpeculativeSlidingEngine,
                         ::testing::Values(SpecCase{"mistral_f32", R"({"method": "ngram",
                                                    "num_speculative_tokens": 3,
                                                    "prompt_lookup_min": 2})",
                                                    "", false}));

// Hybrid targets whose every decoding step verifies drafts: the state at a block boundary among
// a step's kept tokens lives only in the worker's draft snapshots (or its slot) until the next
// step, which saves it as a checkpoint. A chat's next turn, repeating the prompt and the
// answer, resumes inside the answer and gives a cold run's tokens.
class SpeculativeHybridEngine : public SpeculativeEngine {
 protected:
  // `prompt`'s 24 greedy outputs alone in `e`, and its cached-token count.
  static std::vector<int32_t> generate(EngineCore& e, const std::string& name,
                                       const std::vector<int32_t>& prompt, int64_t* cached) {
    EXPECT_TRUE(e.add_request(test::greedy_core_request(name, prompt, 24)).ok());
    std::vector<int32_t> tokens;
    while (e.has_unfinished()) {
      auto outs = e.step();
      EXPECT_TRUE(outs.ok());
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        *cached = o.num_cached_tokens;
      }
    }
    return tokens;
  }
};

TEST_P(SpeculativeHybridEngine, ANextTurnResumesInsideTheDraftedAnswer) {
  auto e = engine(config(), true);
  const std::vector<int32_t>& prompt = prompts_[3];  // 26 tokens: last prompt boundary 24
  int64_t cached = 0;
  const std::vector<int32_t> first = generate(*e, "first", prompt, &cached);
  ASSERT_EQ(first.size(), 24u);
  EXPECT_GT(e->counters().spec_decode.num_drafts, 0);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.begin(), first.end());
  next.insert(next.end(), prompts_[0].begin(), prompts_[0].end());
  auto cold = engine(config(), false);
  const std::vector<int32_t> want = generate(*cold, "x", next, &cached);
  EXPECT_EQ(generate(*e, "next", next, &cached), want);
  // Past the prompt's own last boundary (24): a checkpoint its drafted decoding kept.
  EXPECT_GT(cached, 24);
  EXPECT_EQ(cached % 4, 0);
  EXPECT_EQ(e->scheduler().kv().usage(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    HybridTargets, SpeculativeHybridEngine,
    ::testing::Values(SpecCase{"qwen3_5_f32", R"({"method": "draft_model", "model": "x",
                                "num_speculative_tokens": 3})",
                               "llama3_f32", false},
                      SpecCase{"qwen3_next_f32",
                               R"({"method": "qwen3_next_mtp", "num_speculative_tokens": 2})", "",
                               false}));

TEST(SpeculativeProposers, CachedProposersNeedAFullAttentionGroup) {
  auto target = load_fixture("mistral_f32");  // sliding-window layers only
  ASSERT_NE(target, nullptr);
  auto draft = load_fixture("llama3_f32", &target->model->backend());
  ASSERT_NE(draft, nullptr);
  ProposerOptions po;
  po.config.method = SpeculativeMethod::kDraftModel;
  po.config.num_speculative_tokens = 2;
  po.max_model_len = 64;
  po.num_blocks = 32;
  po.block_size = 4;
  po.draft_model = draft->model.get();
  auto p = make_proposer(*target->model, po);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("every KV cache group of the model is a sliding window"),
            std::string::npos)
      << p.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Proposers, SpeculativeEngine,
    ::testing::Values(
        SpecCase{"llama3_f32", R"({"method": "ngram", "num_speculative_tokens": 3,
                  "prompt_lookup_min": 2, "prompt_lookup_max": 4})",
                 "", true},
        SpecCase{"qwen3_moe_f32", R"({"method": "ngram", "num_speculative_tokens": 2,
                  "prompt_lookup_min": 1})",
                 "", false},
        SpecCase{"qwen3_f32", R"({"method": "draft_model", "model": "x",
                  "num_speculative_tokens": 4})",
                 "qwen3_f32", true},
        SpecCase{"llama3_f32", R"({"method": "draft_model", "model": "x",
                  "num_speculative_tokens": 3})",
                 "llama3_bf16", true},
        SpecCase{"deepseek_v3_f32", R"({"method": "draft_model", "model": "x",
                  "num_speculative_tokens": 2})",
                 "llama3_f32", false},
        SpecCase{"deepseek_v3_f32", R"({"num_speculative_tokens": 1, "method": "mtp"})", "", false},
        SpecCase{"deepseek_v3_bf16", R"({"num_speculative_tokens": 3, "method": "deepseek_mtp"})",
                 "", false},
        // DeepSeek-V3.2: the MTP block has an indexer of its own over its own cache.
        SpecCase{"deepseek_v32_f32", R"({"num_speculative_tokens": 2, "method": "mtp"})", "",
                 false},
        // Hybrid targets: a rejected draft must leave nothing in the recurrent state. A weak
        // draft model rejects most drafts part-way.
        SpecCase{"qwen3_next_f32", R"({"method": "ngram", "num_speculative_tokens": 3,
                  "prompt_lookup_min": 1})",
                 "", false},
        SpecCase{"qwen3_5_f32", R"({"method": "draft_model", "model": "x",
                  "num_speculative_tokens": 3})",
                 "llama3_f32", false},
        SpecCase{"qwen3_5_moe_f32", R"({"method": "draft_model", "model": "x",
                  "num_speculative_tokens": 2})",
                 "qwen3_f32", false},
        SpecCase{"qwen3_5_bf16", R"({"method": "draft_model", "model": "x",
                  "num_speculative_tokens": 2})",
                 "llama3_bf16", false},
        // Their MTP layers (random weights: drafts rarely right), under the guides' aliases.
        SpecCase{"qwen3_next_f32", R"({"method": "qwen3_next_mtp", "num_speculative_tokens": 2})",
                 "", false},
        SpecCase{"qwen3_5_f32", R"({"method": "qwen3_5_mtp", "num_speculative_tokens": 3})", "",
                 false},
        SpecCase{"qwen3_5_moe_bf16", R"({"method": "mtp", "num_speculative_tokens": 1})", "",
                 false}));

}  // namespace
}  // namespace kestrel
