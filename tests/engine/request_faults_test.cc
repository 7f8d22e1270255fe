// Requests that go wrong end alone and cleanly. One whose masks leave no token to sample ends
// instead of sampling token 0 until max_tokens: with "stop" when its output constraint is
// complete (a finished document that ignore_eos or min_tokens kept from ending on EOS), with an
// error otherwise; a constraint that refuses the sampled token fails the request too. A step
// that throws fails only the requests it scheduled, keeps the engine serving, and leaves none of
// the blocks it was to write in the prefix cache. Nothing is left in the engine afterwards.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "engine/engine_core.h"
#include "engine/engine_runs.h"
#include "engine/request_names.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

// Allows exactly `script` in order, then nothing (and is complete from then on). With
// `refuse_at` >= 0 it refuses the token sampled at that position.
class ScriptConstraint final : public TokenConstraint {
 public:
  explicit ScriptConstraint(std::vector<int32_t> script, int refuse_at = -1)
      : script_(std::move(script)), refuse_at_(refuse_at) {}
  void fill_bitmask(std::vector<uint64_t>& bits) override {
    bits.clear();
    if (done_ >= script_.size()) return;
    const int32_t t = script_[done_];
    bits.assign(size_t(t / 64 + 1), 0);
    bits.back() = 1ull << (t % 64);
  }
  bool accept(int32_t token) override {
    if (int(done_) == refuse_at_) return false;
    EXPECT_EQ(token, script_[done_]);
    ++done_;
    return true;
  }
  bool complete() const override { return done_ == script_.size(); }

 private:
  std::vector<int32_t> script_;
  int refuse_at_;
  size_t done_ = 0;
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
  std::string error;
  bool invalid_request = false;
};

// Throws from fill_bitmask() once it has let `after` tokens through: a fault inside a step.
class ThrowingConstraint final : public TokenConstraint {
 public:
  explicit ThrowingConstraint(int after) : after_(after) {}
  void fill_bitmask(std::vector<uint64_t>& bits) override {
    if (seen_ >= after_) throw std::runtime_error("constraint exploded");
    bits.assign(1024, ~0ull);
  }
  bool accept(int32_t) override {
    ++seen_;
    return true;
  }
  bool complete() const override { return false; }

 private:
  int after_;
  int seen_ = 0;
};

class RequestFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    LoadOptions o;
    o.model = test::fixtures_dir() + "/models/llama3_f32";
    o.threads = 2;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    lm_ = std::move(*m);
    SchedulerConfig c;
    c.block_size = 16;
    c.num_blocks = 64;
    c.max_model_len = 256;
    engine_ = build_local_core(*lm_->model, c,
                               std::vector<int32_t>(lm_->generation.eos_token_ids.begin(),
                                                    lm_->generation.eos_token_ids.end()));
  }

  EngineRequest request(const std::string& id, int64_t max_tokens = 20,
                        std::vector<int32_t> prompt = {5, 17, 42, 9}) const {
    EngineRequest r;
    r.id = test::handle(id);
    r.prompt_token_ids = std::move(prompt);
    r.sampling.temperature = 1.0f;
    r.seed = 3;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  std::map<std::string, Outcome> run() {
    std::map<std::string, Outcome> out;
    for (int steps = 0; engine_->has_unfinished() && steps < 1000; ++steps) {
      auto outs = engine_->step();
      EXPECT_TRUE(outs.ok());
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        Outcome& r = out[test::name_of(o.id)];
        EXPECT_FALSE(r.finish) << test::name_of(o.id) << " output after finishing";
        r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finish_reason) r.finish = o.finish_reason;
        r.error = o.error;
        r.invalid_request = o.invalid_request;
      }
    }
    EXPECT_FALSE(engine_->has_unfinished());
    EXPECT_EQ(test::worker_requests(*engine_), 0u);
    EXPECT_EQ(engine_->scheduler().kv().usage(), 0.0);
    return out;
  }

  std::unique_ptr<LoadedModel> lm_;
  std::unique_ptr<EngineCore> engine_;
};

TEST_F(RequestFaults, CompleteConstraintEndsWithStop) {
  EngineRequest r = request("doc");
  r.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{11, 12, 13});
  ASSERT_TRUE(engine_->add_request(r).ok());
  ASSERT_TRUE(engine_->add_request(request("free", 6)).ok());
  const auto out = run();
  EXPECT_EQ(out.at("doc").tokens, (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(out.at("doc").finish, FinishReason::kStop);
  EXPECT_EQ(out.at("free").tokens.size(), 6u);
  EXPECT_EQ(out.at("free").finish, FinishReason::kLength);
}

TEST_F(RequestFaults, NothingAllowedIsAnErrorNamingTheCause) {
  EngineRequest r = request("stuck");
  // The constraint wants token 11; allowed_token_ids permits only 12.
  r.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{11, 12});
  r.logits_rules.allowed_token_ids = {12};
  ASSERT_TRUE(engine_->add_request(r).ok());
  const auto out = run();
  EXPECT_TRUE(out.at("stuck").tokens.empty());
  EXPECT_EQ(out.at("stuck").finish, FinishReason::kError);
  EXPECT_NE(out.at("stuck").error.find("no token is allowed"), std::string::npos);
  EXPECT_TRUE(out.at("stuck").invalid_request);  // the server answers 400
}

TEST_F(RequestFaults, RefusedTokenFailsTheRequest) {
  EngineRequest r = request("refused");
  r.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{11, 12, 13}, 1);
  ASSERT_TRUE(engine_->add_request(r).ok());
  const auto out = run();
  EXPECT_EQ(out.at("refused").tokens, (std::vector<int32_t>{11}));
  EXPECT_EQ(out.at("refused").finish, FinishReason::kError);
  EXPECT_NE(out.at("refused").error.find("refused"), std::string::npos);
  EXPECT_FALSE(out.at("refused").invalid_request);  // a constraint bug, not the request's fault
}

TEST_F(RequestFaults, ThrowingConstraintFailsOnlyItsRequest) {
  EngineRequest bad = request("bad", 10);
  bad.constraint = std::make_shared<ThrowingConstraint>(2);  // fails mid-decode
  ASSERT_TRUE(engine_->add_request(bad).ok());
  ASSERT_TRUE(engine_->add_request(request("good", 6)).ok());
  const auto out = run();
  EXPECT_EQ(out.at("bad").finish, FinishReason::kError);
  EXPECT_EQ(out.at("bad").tokens.size(), 2u);
  EXPECT_NE(out.at("bad").error.find("constraint exploded"), std::string::npos);
  EXPECT_EQ(out.at("good").finish, FinishReason::kLength);
  EXPECT_EQ(out.at("good").tokens.size(), 6u);
}

// The model with a forward pass that throws on demand: a failure of a whole step.
class FaultyModel final : public CausalLM {
 public:
  explicit FaultyModel(CausalLM& m) : m_(m) {}
  bool fail_next = false;
  const ModelConfig& config() const override { return m_.config(); }
  void forward(const ForwardBatch& b, KVCacheStorage& kv, float* logits) override {
    m_.forward(b, kv, logits);
  }
  void forward_hidden(const ForwardBatch& b, KVCacheStorage& kv) override {
    if (fail_next) {
      fail_next = false;
      throw std::runtime_error("device lost");
    }
    m_.forward_hidden(b, kv);
  }
  void head_logits(std::span<const int32_t> rows, float* logits) override {
    m_.head_logits(rows, logits);
  }
  size_t weight_bytes() const override { return m_.weight_bytes(); }
  DType kv_cache_dtype() const override { return m_.kv_cache_dtype(); }
  Backend& backend() override { return m_.backend(); }

 private:
  CausalLM& m_;
};

TEST_F(RequestFaults, FailedStepEndsItsRequestsAndUnpublishesTheirBlocks) {
  FaultyModel faulty(*lm_->model);
  SchedulerConfig c;
  c.block_size = 16;
  c.num_blocks = 64;
  c.max_model_len = 256;
  const auto engine_core = build_local_core(faulty, c, {});
  EngineCore& engine = *engine_core;
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(100 + i);
  ASSERT_TRUE(engine.add_request(request("a", 4, prompt)).ok());
  ASSERT_TRUE(engine.add_request(request("b", 4)).ok());
  faulty.fail_next = true;
  auto failed = engine.step();
  ASSERT_TRUE(failed.ok()) << failed.error().message;  // the engine itself carries on
  ASSERT_EQ(failed->size(), 2u);
  for (const EngineCoreOutput& o : *failed) {
    EXPECT_EQ(o.finish_reason, FinishReason::kError) << test::name_of(o.id);
    EXPECT_NE(o.error.find("device lost"), std::string::npos);
    EXPECT_FALSE(o.invalid_request);
  }
  EXPECT_FALSE(engine.scheduler().has_unfinished());
  EXPECT_EQ(engine.scheduler().kv().usage(), 0.0);
  // The worker drops them with the next step, which has nothing else to do.
  auto flushed = engine.step();
  ASSERT_TRUE(flushed.ok());
  EXPECT_TRUE(flushed->empty());
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(test::worker_requests(engine), 0u);
  // "a"'s blocks were published when scheduled but never written: the same prompt computes
  // them again, and then they are good to share.
  auto cached_at_first_output = [&](const std::string& id) {
    EXPECT_TRUE(engine.add_request(request(id, 2, prompt)).ok());
    int64_t cached = -1;
    for (int steps = 0; engine.has_unfinished() && steps < 50; ++steps) {
      auto outs = engine.step();
      EXPECT_TRUE(outs.ok());
      for (const EngineCoreOutput& o : *outs)
        if (cached < 0) cached = o.num_cached_tokens;
    }
    return cached;
  };
  EXPECT_EQ(cached_at_first_output("again"), 0);
  EXPECT_EQ(cached_at_first_output("third"), 32);  // two full blocks of 16
}

}  // namespace
}  // namespace kestrel
