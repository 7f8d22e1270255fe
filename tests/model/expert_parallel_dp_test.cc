// Expert parallelism across data-parallel ranks, between real processes: D data-parallel groups
// of T tensor-parallel ranks, the routed experts spread over all D×T ranks, each group running
// its own batch — different sizes, and in some steps none at all (its ranks only serve the
// others' MoE rounds in finish_step) — and, on DeepSeek-V3, the MTP module's MoE layer run by
// some groups only. Every rank's logits must be the unsplit model's for its own prompts, bit for
// bit, and every rank must hold only its share of the experts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

#include "base/mmap_file.h"
#include "distributed/fork_ranks.h"
#include "distributed/shm_comm.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kBlock = 16;
using Prompt = std::vector<int32_t>;

std::vector<Prompt> golden_prompts(const std::string& dir) {
  auto text = read_text_file(dir + "/golden.json");
  EXPECT_TRUE(text.ok());
  return nlohmann::json::parse(*text).at("prompts").get<std::vector<Prompt>>();
}

// One step of one group: the prompts it runs (indices), and whether it then runs the MTP module
// over its batch.
struct GroupStep {
  std::vector<size_t> prompts;
  bool mtp = false;
};

// The forward of `prompts` in one batch: every row's logits, then (mtp) the MTP module's logits
// of every row, fed the same tokens and the final hidden states.
std::vector<float> run_batch(CausalLM& model, const std::vector<Prompt>& all,
                             const GroupStep& step) {
  const int64_t V = model.config().vocab_size;
  KVCacheStorage kv = model.make_kv_cache(64, kBlock);
  BatchBuilder bb(kBlock);
  int32_t next = 1;
  int64_t rows = 0;
  for (size_t i : step.prompts) {
    std::vector<int32_t> table;
    for (size_t p = 0; p < all[i].size(); p += kBlock) table.push_back(next++);
    bb.add(all[i], 0, table, BatchBuilder::Logits::kAll);
    rows += int64_t(all[i].size());
  }
  std::vector<float> logits(size_t(rows * V));
  if (rows == 0) return logits;  // a group with nothing this step
  const ForwardBatch batch = bb.batch();
  model.forward(batch, kv, logits.data());
  if (!step.mtp) return logits;
  std::vector<int32_t> all_rows(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) all_rows[size_t(r)] = int32_t(r);
  std::vector<float> hidden(size_t(rows * model.config().hidden_size));
  model.final_hidden(all_rows, hidden.data());
  KVCacheStorage mtp_kv = model.make_kv_cache_for_layers(1, 64, kBlock);
  std::vector<float> mtp(size_t(rows * V));
  model.mtp_forward(batch, hidden.data(), mtp_kv, mtp.data(), nullptr);
  logits.insert(logits.end(), mtp.begin(), mtp.end());
  return logits;
}

// The steps every layout runs: all groups busy with batches of different sizes; the first group
// idle; then only the first and last group busy, the last one running the MTP module too.
std::vector<std::vector<GroupStep>> plan_steps(size_t prompts, int groups, bool mtp) {
  std::vector<std::vector<GroupStep>> steps(3, std::vector<GroupStep>(size_t(groups)));
  for (size_t i = 0; i < prompts; ++i) steps[0][i % size_t(groups)].prompts.push_back(i);
  for (size_t i = 0; i < prompts; ++i) steps[1][1 + i % size_t(groups - 1)].prompts.push_back(i);
  steps[2][0].prompts = {0};
  steps[2][size_t(groups) - 1].prompts = {1, 2};
  steps[2][size_t(groups) - 1].mtp = mtp;
  return steps;
}

class ExpertParallelAcrossDp : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {
};

TEST_P(ExpertParallelAcrossDp, EveryGroupGetsTheUnsplitModelsLogits) {
  const auto [fixture, groups, tp] = GetParam();
  const std::string dir = test::fixtures_dir() + "/models/" + fixture;
  auto golden = read_text_file(dir + "/golden.json");
  ASSERT_TRUE(golden.ok());
  LoadOptions o;
  o.model = dir;
  o.threads = 1;
  o.dtype = nlohmann::json::parse(*golden).at("dtype").get<std::string>();
  auto whole = load_model(o);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  CausalLM& unsplit = *(*whole)->model;
  const bool mtp = unsplit.num_mtp_modules() > 0;
  const std::vector<Prompt> prompts = golden_prompts(dir);
  const auto steps = plan_steps(prompts.size(), groups, mtp);
  // What each group must see at each step (batch invariance: the same rows as any batch).
  std::vector<std::vector<std::vector<float>>> want(steps.size());
  for (size_t s = 0; s < steps.size(); ++s)
    for (const GroupStep& g : steps[s]) want[s].push_back(run_batch(unsplit, prompts, g));
  const double whole_experts = double(unsplit.resident_weight_bytes());

  const std::string tag = test::unique_shm_name();
  const auto status = test::run_ranks(groups * tp, [&](int flat) {
    const int d = flat / tp, t = flat % tp;
    auto connect = [&](const std::string& name, int rank, int size) {
      ShmCommOptions co;
      co.name = name;
      co.rank = rank;
      co.size = size;
      co.timeout = std::chrono::milliseconds(20000);
      co.label = "test";
      return ShmComm::connect(co);
    };
    auto ep = connect(tag + "-ep" + std::to_string(t), d, groups);
    if (!ep.ok()) return 2;
    std::unique_ptr<ShmComm> tp_comm;
    if (tp > 1) {
      auto c = connect(tag + "-tp" + std::to_string(d), t, tp);
      if (!c.ok()) return 2;
      tp_comm = std::move(*c);
    }
    LoadOptions ro = o;
    ro.tp_rank = t;
    ro.tp_size = tp;
    ro.tp_comm = tp_comm.get();
    ro.expert_parallel = true;
    ro.dp_rank = d;
    ro.dp_size = groups;
    ro.ep_comm = ep->get();
    auto part = load_model(ro);
    if (!part.ok()) {
      std::fprintf(stderr, "rank (%d, %d): %s\n", d, t, part.error().message.c_str());
      return 3;
    }
    CausalLM& model = *(*part)->model;
    if (double(model.resident_weight_bytes()) >= whole_experts) return 4;
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::vector<float> got = run_batch(model, prompts, steps[s][size_t(d)]);
      model.finish_step();
      const std::vector<float>& w = want[s][size_t(d)];
      if (got.size() != w.size()) return 5;
      if (std::memcmp(got.data(), w.data(), w.size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "rank (%d, %d), step %zu: logits differ from the unsplit model's\n", d,
                     t, s);
        return 10 + int(s);
      }
    }
    return 0;
  });
  for (int r = 0; r < groups * tp; ++r)
    EXPECT_EQ(status[size_t(r)], 0) << "data-parallel rank " << r / tp << ", TP rank " << r % tp;
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, ExpertParallelAcrossDp,
                         ::testing::Combine(::testing::Values("qwen3_moe_f32", "deepseek_v3_f32",
                                                              "deepseek_v3_bf16"),
                                            ::testing::Values(2, 4), ::testing::Values(1, 2)));

// The guide's DP4 x TP4 on a model with 8 experts: 16 ranks, half of them holding none (they
// still take part in every exchange).
INSTANTIATE_TEST_SUITE_P(MoreRanksThanExperts, ExpertParallelAcrossDp,
                         ::testing::Values(std::make_tuple("deepseek_v3_f32", 4, 4)));

}  // namespace
}  // namespace kestrel
