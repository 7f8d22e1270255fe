// ModelRunner driven by the real Scheduler on a fixture checkpoint: sampling state is per request
// (a seeded request samples the same tokens alone or batched), prefill chunks sample nothing,
// and inconsistent steps are errors.
#include "runner/model_runner.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "model/loader.h"
#include "model/safetensors.h"
#include "runner/logprobs_reference.h"
#include "sched/scheduler.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::unique_ptr<LoadedModel> load_fixture() {
  LoadOptions o;
  o.model = test::fixtures_dir() + "/models/llama3_f32";
  o.threads = 2;
  auto m = load_model(o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.block_size = 16;
  c.num_blocks = 32;
  c.max_model_len = 128;
  return c;
}

RunnerRequestParams sampled_params(uint64_t seed) {
  RunnerRequestParams p;
  p.sampling.temperature = 1.0f;
  p.seed = seed;
  return p;
}

const std::vector<int32_t> kPromptA = {5, 77, 301, 42, 9, 250, 13, 400, 88};
const std::vector<int32_t> kPromptB = {17, 3, 460, 211, 99};

// Runs the given requests (id → seed) to max_tokens and returns each one's outputs.
std::map<RequestId, std::vector<int32_t>> generate(LoadedModel& lm,
                                                   const std::map<RequestId, uint64_t>& seeds,
                                                   int64_t max_tokens) {
  const SchedulerConfig config = small_config();
  Scheduler sched(config);
  ModelRunner runner(*lm.model, lm.model->make_kv_cache(config.num_blocks, config.block_size));
  for (const auto& [id, seed] : seeds) {
    EXPECT_TRUE(sched.add_request(id, id == "b" ? kPromptB : kPromptA, max_tokens).ok());
    runner.add_request(id, sampled_params(seed));
  }
  std::map<RequestId, std::vector<int32_t>> outputs;
  while (sched.has_unfinished()) {
    const SchedulerOutput out = sched.schedule();
    auto sampled = runner.execute(out, [&](const RequestId& id) { return sched.request(id); });
    EXPECT_TRUE(sampled.ok()) << (sampled.ok() ? "" : sampled.error().message);
    if (!sampled.ok()) break;
    std::unordered_map<RequestId, int32_t> tokens;
    for (const auto& [id, s] : sampled->sampled) {
      EXPECT_LE(s.logprob, 0.0f);
      tokens[id] = s.token;
      outputs[id].push_back(s.token);
    }
    for (const RequestId& id : sched.update_from_output(out, tokens)) {
      runner.remove_request(id);
      sched.release(id);
    }
  }
  EXPECT_EQ(runner.num_requests(), 0u);
  return outputs;
}

TEST(ModelRunner, SeededSamplingIsPerRequest) {
  auto lm = load_fixture();
  ASSERT_TRUE(lm);
  const auto alone = generate(*lm, {{"a", 7}}, 12);
  const auto batched = generate(*lm, {{"a", 7}, {"b", 9}}, 12);
  const auto other_seed = generate(*lm, {{"a", 8}}, 12);
  ASSERT_EQ(alone.at("a").size(), 12u);
  EXPECT_EQ(alone.at("a"), batched.at("a"));
  EXPECT_EQ(batched.at("b").size(), 12u);
  EXPECT_NE(alone.at("a"), other_seed.at("a"));
}

TEST(ModelRunner, PrefillChunksSampleNothing) {
  auto lm = load_fixture();
  ASSERT_TRUE(lm);
  SchedulerConfig config = small_config();
  config.max_num_batched_tokens = 4;
  Scheduler sched(config);
  ModelRunner runner(*lm->model, lm->model->make_kv_cache(config.num_blocks, config.block_size));
  ASSERT_TRUE(sched.add_request("a", kPromptA, 2).ok());
  runner.add_request("a", sampled_params(1));
  const auto lookup = [&](const RequestId& id) { return sched.request(id); };
  // 9 prompt tokens in chunks of 4: two chunks without a token, then the last one samples.
  for (int step = 0; step < 3; ++step) {
    const SchedulerOutput out = sched.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    auto sampled = runner.execute(out, lookup);
    ASSERT_TRUE(sampled.ok());
    EXPECT_EQ(sampled->sampled.size(), step < 2 ? 0u : 1u) << "step " << step;
    EXPECT_TRUE(sampled->prompt_logprobs.empty()) << "nobody asked for prompt logprobs";
    std::unordered_map<RequestId, int32_t> tokens;
    for (const auto& [id, s] : sampled->sampled) tokens[id] = s.token;
    sched.update_from_output(out, tokens);
  }
}

TEST(ModelRunner, InconsistentStepsAreErrors) {
  auto lm = load_fixture();
  ASSERT_TRUE(lm);
  const SchedulerConfig config = small_config();
  Scheduler sched(config);
  ModelRunner runner(*lm->model, lm->model->make_kv_cache(config.num_blocks, config.block_size));
  ASSERT_TRUE(sched.add_request("a", kPromptA, 2).ok());
  const SchedulerOutput out = sched.schedule();
  // No sampling state registered for "a".
  EXPECT_FALSE(runner.execute(out, [&](const RequestId& id) { return sched.request(id); }).ok());
  // The lookup does not know the request.
  runner.add_request("a", sampled_params(1));
  EXPECT_FALSE(
      runner.execute(out, [](const RequestId&) -> const Request* { return nullptr; }).ok());
  // More tokens scheduled than the request has.
  SchedulerOutput bad = out;
  bad.scheduled[0].num_new_tokens += 1;
  EXPECT_FALSE(runner.execute(bad, [&](const RequestId& id) { return sched.request(id); }).ok());
  EXPECT_TRUE(runner.execute(out, [&](const RequestId& id) { return sched.request(id); }).ok());
}

// Prompt logprobs equal log-softmax of transformers' logits (the fixture's golden.safetensors) at
// each position, for the next prompt token and the top-2 alternatives (ids and values), whether
// the prompt runs whole or in chunks of 4.
TEST(ModelRunner, PromptLogprobsMatchTheReferenceLogits) {
  auto lm = load_fixture();
  ASSERT_TRUE(lm);
  const std::string dir = test::fixtures_dir() + "/models/llama3_f32";
  auto text = read_text_file(dir + "/golden.json");
  ASSERT_TRUE(text.ok());
  const auto prompt = nlohmann::json::parse(*text).at("prompts")[2].get<std::vector<int32_t>>();
  auto st = SafetensorsFile::open(dir + "/golden.safetensors");
  ASSERT_TRUE(st.ok());
  auto ref = (*st)->tensor("logits.2");
  ASSERT_TRUE(ref.ok());
  const int64_t vocab = lm->config.vocab_size;
  const float* golden = ref->as<float>();

  for (int64_t budget : {int64_t{256}, int64_t{4}}) {
    SchedulerConfig config = small_config();
    config.max_num_batched_tokens = budget;
    Scheduler sched(config);
    ModelRunner runner(*lm->model, lm->model->make_kv_cache(config.num_blocks, config.block_size));
    ASSERT_TRUE(sched.add_request("p", prompt, 1).ok());
    RunnerRequestParams params = sampled_params(3);
    params.prompt_logprobs = 2;
    runner.add_request("p", params);
    std::vector<TokenLogprobs> scored;
    while (sched.has_unfinished()) {
      const SchedulerOutput out = sched.schedule();
      auto step = runner.execute(out, [&](const RequestId& id) { return sched.request(id); });
      ASSERT_TRUE(step.ok()) << step.error().message;
      const auto it = step->prompt_logprobs.find("p");
      if (it != step->prompt_logprobs.end())
        scored.insert(scored.end(), it->second.begin(), it->second.end());
      std::unordered_map<RequestId, int32_t> tokens;
      for (const auto& [id, s] : step->sampled) tokens[id] = s.token;
      sched.update_from_output(out, tokens);
    }
    ASSERT_EQ(scored.size(), prompt.size() - 1) << "budget " << budget;
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      EXPECT_EQ(scored[p].token, prompt[p + 1]);
      test::expect_logprobs_match(
          scored[p], golden + p * size_t(vocab), vocab, 2, test::Rank::kComputed,
          test::kF32LogitsRelTol,
          "position " + std::to_string(p) + ", budget " + std::to_string(budget));
    }
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Allows only the token `step` positions along `script`, and records what was accepted.
class ScriptedConstraint final : public TokenConstraint {
 public:
  explicit ScriptedConstraint(std::vector<int32_t> script) : script_(std::move(script)) {}
  void mask(std::span<float> logits) override {
    ++masks;
    for (size_t i = 0; i < logits.size(); ++i)
      if (int32_t(i) != script_[accepted.size()]) logits[i] = -INFINITY;
  }
  bool accept(int32_t token) override {
    accepted.push_back(token);
    return true;
  }
  bool complete() const override { return accepted.size() == script_.size(); }
  int masks = 0;
  std::vector<int32_t> accepted;

 private:
  std::vector<int32_t> script_;
};

// A constraint decides the sampled tokens (at temperature 1) and sees each of them once, in
// order; a request without one in the same batch samples as it would alone.
TEST(ModelRunner, ConstraintMasksLogitsAndSeesEveryToken) {
  auto lm = load_fixture();
  ASSERT_TRUE(lm);
  const std::vector<int32_t> script = {11, 500, 3, 3, 42, 7};
  auto constraint = std::make_shared<ScriptedConstraint>(script);
  const SchedulerConfig config = small_config();
  Scheduler sched(config);
  ModelRunner runner(*lm->model, lm->model->make_kv_cache(config.num_blocks, config.block_size));
  ASSERT_TRUE(sched.add_request("a", kPromptA, int64_t(script.size())).ok());
  ASSERT_TRUE(sched.add_request("b", kPromptB, int64_t(script.size())).ok());
  RunnerRequestParams pa = sampled_params(7);
  pa.constraint = constraint;
  runner.add_request("a", pa);
  runner.add_request("b", sampled_params(9));
  std::map<RequestId, std::vector<int32_t>> outputs;
  while (sched.has_unfinished()) {
    const SchedulerOutput out = sched.schedule();
    auto sampled = runner.execute(out, [&](const RequestId& id) { return sched.request(id); });
    ASSERT_TRUE(sampled.ok());
    std::unordered_map<RequestId, int32_t> tokens;
    for (const auto& [id, s] : sampled->sampled) {
      tokens[id] = s.token;
      outputs[id].push_back(s.token);
    }
    for (const RequestId& id : sched.update_from_output(out, tokens)) {
      runner.remove_request(id);
      sched.release(id);
    }
  }
  EXPECT_EQ(outputs.at("a"), script);
  EXPECT_EQ(constraint->accepted, script);
  EXPECT_EQ(constraint->masks, int(script.size()));
  EXPECT_EQ(outputs.at("b"), generate(*lm, {{"b", 9}}, int64_t(script.size())).at("b"));
}

}  // namespace
}  // namespace kestrel
