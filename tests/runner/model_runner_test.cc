// ModelRunner driven by the real Scheduler through the data-only contract on a fixture
// checkpoint: sampling state is per request (a seeded request samples the same tokens alone or
// batched), prefill chunks sample nothing, token masks decide the sampled token, and steps that
// contradict the worker's state are errors.
#include "runner/model_runner.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "formats/safetensors.h"
#include "runner/logprobs_reference.h"
#include "runner/runner_driver.h"

namespace kestrel {
namespace {

using test::RunnerDriver;
using test::sampled_spec;

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.block_size = 16;
  c.num_blocks = 32;
  c.max_model_len = 128;
  return c;
}

const std::vector<int32_t> kPromptA = {5, 77, 301, 42, 9, 250, 13, 400, 88};
const std::vector<int32_t> kPromptB = {17, 3, 460, 211, 99};

// Runs the given requests (id → seed) to max_tokens and returns each one's outputs.
std::map<RequestHandle, std::vector<int32_t>> generate(
    LoadedModel& lm, const std::map<RequestHandle, uint64_t>& seeds, int64_t max_tokens) {
  RunnerDriver d(lm, small_config());
  for (const auto& [id, seed] : seeds)
    EXPECT_TRUE(
        d.sched.add_request(sampled_spec(id, id == 1 ? kPromptB : kPromptA, max_tokens, seed))
            .ok());
  return d.run().outputs;
}

TEST(ModelRunner, SeededSamplingIsPerRequest) {
  auto lm = test::load_llama_fixture();
  ASSERT_TRUE(lm);
  const auto alone = generate(*lm, {{2, 7}}, 12);
  const auto batched = generate(*lm, {{2, 7}, {1, 9}}, 12);
  const auto other_seed = generate(*lm, {{2, 8}}, 12);
  ASSERT_EQ(alone.at(2).size(), 12u);
  EXPECT_EQ(alone.at(2), batched.at(2));
  EXPECT_EQ(batched.at(1).size(), 12u);
  EXPECT_NE(alone.at(2), other_seed.at(2));
}

TEST(ModelRunner, PrefillChunksSampleNothing) {
  auto lm = test::load_llama_fixture();
  ASSERT_TRUE(lm);
  SchedulerConfig config = small_config();
  config.max_num_batched_tokens = 4;
  RunnerDriver d(*lm, config);
  ASSERT_TRUE(d.sched.add_request(sampled_spec(2, kPromptA, 2, 1)).ok());
  // 9 prompt tokens in chunks of 4: two chunks without a token, then the last one samples.
  for (int step = 0; step < 3; ++step) {
    const SchedulerOutput out = d.sched.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    auto result = d.runner.execute(out);
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->sampled.size(), step < 2 ? 0u : 1u) << "step " << step;
    EXPECT_TRUE(result->prompt_logprobs.empty()) << "nobody asked for prompt logprobs";
    d.sched.update_from_output(out, *result);
  }
}

// Every way a step can contradict what the worker holds is an error naming the request.
TEST(ModelRunner, InconsistentStepsAreErrors) {
  auto lm = test::load_llama_fixture();
  ASSERT_TRUE(lm);
  const SchedulerConfig config = small_config();
  Scheduler sched(config);
  ASSERT_TRUE(sched.add_request(sampled_spec(2, kPromptA, 4, 1)).ok());
  const SchedulerOutput first = sched.schedule();
  ASSERT_EQ(first.new_requests.size(), 1u);
  auto fresh_runner = [&] {
    return std::make_unique<ModelRunner>(
        *lm->model, lm->model->make_kv_cache(config.num_blocks, config.block_size));
  };
  auto expect_error = [&](const SchedulerOutput& out, const std::string& what) {
    auto runner = fresh_runner();
    auto r = runner->execute(out);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.error().message.find("request 2"), std::string::npos) << r.error().message;
  };
  {  // A cached request the worker never saw.
    SchedulerOutput bad = first;
    bad.new_requests.clear();
    bad.cached_requests.push_back(CachedRequestData{2, false, {{}}, 0});
    expect_error(bad, "unknown cached request");
  }
  {  // Scheduled without ever being sent.
    SchedulerOutput bad = first;
    bad.new_requests.clear();
    expect_error(bad, "unknown scheduled request");
  }
  {  // More tokens than the worker holds.
    SchedulerOutput bad = first;
    bad.scheduled[0].num_tokens += 1;
    expect_error(bad, "tokens past the end");
  }
  {  // Drafts on a step that does not reach the last token.
    SchedulerOutput bad = first;
    bad.scheduled[0].num_tokens -= 1;
    bad.scheduled[0].draft_token_ids = {1};
    expect_error(bad, "drafts mid-prompt");
  }
  {  // A draft id outside the vocabulary.
    SchedulerOutput bad = first;
    bad.scheduled[0].num_tokens += 1;
    bad.scheduled[0].draft_token_ids = {int32_t(lm->config.vocab_size)};
    expect_error(bad, "draft out of range");
  }
  {  // Drafts under a token mask.
    SchedulerOutput bad = first;
    bad.scheduled[0].num_tokens += 1;
    bad.scheduled[0].draft_token_ids = {1};
    bad.token_masks.push_back(TokenMask{2, {~0ull}});
    expect_error(bad, "drafts with a mask");
  }
  {  // A block table too short for the positions.
    SchedulerOutput bad = first;
    bad.new_requests[0].block_ids[0].clear();
    expect_error(bad, "short table");
  }
  {  // The same request sent as new twice.
    auto runner = fresh_runner();
    ASSERT_TRUE(runner->execute(first).ok());
    SchedulerOutput again = first;
    again.scheduled.clear();
    EXPECT_FALSE(runner->execute(again).ok());
  }
  auto runner = fresh_runner();
  auto ok = runner->execute(first);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->sampled.size(), 1u);
}

// A mask with one allowed token decides the draw even at temperature 1; the other request of
// the batch samples as it would alone.
TEST(ModelRunner, TokenMaskDecidesTheToken) {
  auto lm = test::load_llama_fixture();
  ASSERT_TRUE(lm);
  const std::vector<int32_t> script = {11, 500, 3, 3, 42, 7, 130};
  RunnerDriver d(*lm, small_config());
  ASSERT_TRUE(d.sched.add_request(sampled_spec(2, kPromptA, int64_t(script.size()), 7)).ok());
  ASSERT_TRUE(d.sched.add_request(sampled_spec(1, kPromptB, int64_t(script.size()), 9)).ok());
  std::map<RequestHandle, std::vector<int32_t>> outputs;
  while (d.sched.has_unfinished()) {
    SchedulerOutput out = d.sched.schedule();
    const size_t n = outputs[2].size();
    std::vector<uint64_t> bits(size_t(script[n] / 64 + 1), 0);
    bits[size_t(script[n] / 64)] = 1ull << (script[n] % 64);
    out.token_masks.push_back(TokenMask{2, bits});
    auto result = d.runner.execute(out);
    ASSERT_TRUE(result.ok());
    for (const RequestUpdate& u : d.sched.update_from_output(out, *result))
      outputs[u.id].insert(outputs[u.id].end(), u.new_token_ids.begin(), u.new_token_ids.end());
  }
  EXPECT_EQ(outputs.at(2), script);
  EXPECT_EQ(outputs.at(1), generate(*lm, {{1, 9}}, int64_t(script.size())).at(1));
}

// A mask that allows nothing (or only ids past the vocabulary) is reported as such, with no
// token for that request and the rest of the batch unaffected.
TEST(ModelRunner, EmptyMaskIsReportedNotSampled) {
  auto lm = test::load_llama_fixture();
  ASSERT_TRUE(lm);
  RunnerDriver d(*lm, small_config());
  ASSERT_TRUE(d.sched.add_request(sampled_spec(2, kPromptA, 4, 7)).ok());
  ASSERT_TRUE(d.sched.add_request(sampled_spec(1, kPromptB, 4, 9)).ok());
  SchedulerOutput out = d.sched.schedule();
  const size_t words = size_t(lm->config.vocab_size / 64 + 2);
  std::vector<uint64_t> past_vocab(words, 0);
  past_vocab.back() = 1;  // an id past the vocabulary only
  out.token_masks.push_back(TokenMask{2, past_vocab});
  auto result = d.runner.execute(out);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(result->failures.size(), 1u);
  EXPECT_EQ(result->failures[0].id, 2);
  EXPECT_TRUE(result->failures[0].no_token_allowed);
  ASSERT_EQ(result->sampled.size(), 1u);
  EXPECT_EQ(result->sampled[0].id, 1);
}

// Prompt logprobs equal log-softmax of transformers' logits (the fixture's golden.safetensors) at
// each position, for the next prompt token and the top-2 alternatives (ids and values), whether
// the prompt runs whole or in chunks of 4.
TEST(ModelRunner, PromptLogprobsMatchTheReferenceLogits) {
  auto lm = test::load_llama_fixture();
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
    RunnerDriver d(*lm, config);
    RequestSpec spec = sampled_spec(3, prompt, 1, 3);
    spec.sampling.prompt_logprobs = 2;
    spec.read_prefix_cache = false;
    ASSERT_TRUE(d.sched.add_request(spec).ok());
    std::vector<TokenLogprobs> scored;
    while (d.sched.has_unfinished()) {
      const SchedulerOutput out = d.sched.schedule();
      auto step = d.runner.execute(out);
      ASSERT_TRUE(step.ok()) << step.error().message;
      for (const auto& [id, s] : step->prompt_logprobs) {
        EXPECT_EQ(id, 3);
        scored.insert(scored.end(), s.begin(), s.end());
      }
      d.sched.update_from_output(out, *step);
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
