// Tiny random checkpoints (tools/make_fixtures.py, transformers) against their golden logits
// and greedy continuations; plus batch, chunk and block-layout invariance of the forward pass.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "base/mmap_file.h"
#include "formats/safetensors.h"
#include "logit_error.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int kBlock = 16;

struct Golden {
  std::string dtype;
  std::string quant_type;  // an msModelSlim fixture's (tools/make_modelslim_fixtures.py)
  std::vector<std::vector<int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // [prompt] -> [len * vocab]
};

Golden read_golden(const std::string& dir) {
  Golden g;
  auto text = read_text_file(dir + "/golden.json");
  EXPECT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  g.dtype = j.at("dtype").get<std::string>();
  g.quant_type = j.value("quant_type", std::string());
  g.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  g.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
  auto st = SafetensorsFile::open(dir + "/golden.safetensors");
  EXPECT_TRUE(st.ok()) << st.error().message;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    auto t = (*st)->tensor("logits." + std::to_string(i));
    EXPECT_TRUE(t.ok());
    g.logits.emplace_back(t->as<float>(), t->as<float>() + t->numel());
  }
  return g;
}

// Loads a fixture with activations of its golden's dtype (the FP8 fixture's goldens are an f32
// forward over its dequantized weights, though its config says bfloat16) and, for fixtures
// with a quantized KV cache, the --kv-cache-dtype its goldens were computed with.
std::unique_ptr<LoadedModel> load(const std::string& dir, int threads = 2) {
  LoadOptions o;
  o.model = dir;
  o.threads = threads;
  auto text = read_text_file(dir + "/golden.json");
  if (text.ok()) {
    const auto j = nlohmann::json::parse(*text);
    o.dtype = j.at("dtype").get<std::string>();
    if (j.contains("kv_cache_dtype")) o.kv_cache_dtype = j["kv_cache_dtype"].get<std::string>();
  }
  auto m = load_model(o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int32_t> blocks(int first, int n) {
  std::vector<int32_t> b(n);
  std::iota(b.begin(), b.end(), first);
  return b;
}

// A model's KV cache of `stride` blocks per KV cache group: group g's blocks are b + g·stride
// for the table's b, so the groups (e.g. Qwen2's full and sliding layers) never share a block;
// and for hybrid models, state slots for kStateSlots sequences.
constexpr int32_t kStateSlots = 4;
struct GroupedCache {
  GroupedCache(LoadedModel& lm, int stride)
      : stride(stride),
        kv(lm.model->make_kv_cache(
            int64_t(stride) * int64_t(lm.model->kv_cache_layout(kBlock).groups.size()), kBlock,
            kStateSlots)) {}

  std::vector<std::vector<int32_t>> tables(const std::vector<int32_t>& table) const {
    std::vector<std::vector<int32_t>> out(size_t(kv.num_groups()), table);
    for (size_t g = 0; g < out.size(); ++g)
      for (int32_t& b : out[g]) b += int32_t(g) * stride;
    return out;
  }
  BatchBuilder builder() const { return BatchBuilder(kBlock, kv.num_groups()); }
  // `slot`: the sequence's linear-attention state slot (hybrid models; others ignore it).
  void add(BatchBuilder& bb, std::span<const int32_t> tokens, int32_t start,
           const std::vector<int32_t>& table, size_t num_logits, int32_t slot = 0) const {
    bb.add(tokens, start, tables(table), num_logits, slot);
  }

  int stride;
  KVCacheStorage kv;
};

// Logits of every position of `prompt` in one forward.
std::vector<float> full_logits(LoadedModel& lm, GroupedCache& c, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& table) {
  BatchBuilder bb = c.builder();
  c.add(bb, prompt, 0, table, prompt.size());
  std::vector<float> out(prompt.size() * lm.config.vocab_size);
  lm.model->forward(bb.batch(), c.kv, out.data());
  return out;
}

int32_t argmax(const float* row, int64_t n) {
  return int32_t(std::max_element(row, row + n) - row);
}

double max_rel_err(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab,
                   size_t* worst_row = nullptr) {
  return test::max_row_rel_err(a.data(), b.data(), int64_t(b.size()) / vocab, vocab, worst_row);
}

class ModelGolden : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return test::fixtures_dir() + "/models/" + GetParam(); }
};

TEST_P(ModelGolden, LogitsMatchReference) {
  auto lm = load(dir());
  ASSERT_TRUE(lm);
  Golden g = read_golden(dir());
  // Quantized activations are a step function of their input: where an input sits within
  // f32's rounding of a code boundary, Kestrel's f32 forward and the float64 reference pick
  // neighbouring codes (the generator counts such inputs), moving that linear's output by up to
  // one code's share. The linear itself matches float64 within f32 rounding
  // (backend/int8_matmul_test.cc).
  const double tol = !g.quant_type.empty() ? 1e-2 : g.dtype == "float32" ? 1e-4 : 2e-2;
  const int64_t V = lm->config.vocab_size;
  GroupedCache kv(*lm, 16);
  for (size_t p = 0; p < g.prompts.size(); ++p) {
    const auto& prompt = g.prompts[p];
    auto logits = full_logits(*lm, kv, prompt, blocks(0, int(prompt.size() + kBlock - 1) / kBlock));
    ASSERT_EQ(logits.size(), g.logits[p].size());
    size_t row = 0;
    const double err = max_rel_err(logits, g.logits[p], V, &row);
    EXPECT_LE(err, tol) << GetParam() << " prompt " << p << " position " << row;
    RecordProperty("max_rel_err_prompt" + std::to_string(p), std::to_string(err));
  }
}

TEST_P(ModelGolden, GreedyDecodeWithCacheMatchesReference) {
  auto lm = load(dir());
  ASSERT_TRUE(lm);
  Golden g = read_golden(dir());
  const int64_t V = lm->config.vocab_size;
  GroupedCache kv(*lm, 8);
  // Blocks in reverse order: the sequence's KV is not contiguous in the pool.
  std::vector<int32_t> table = {7, 5, 3, 1, 6, 4};
  std::vector<float> logits(V);
  for (size_t p = 0; p < g.prompts.size(); ++p) {
    std::vector<int32_t> seq = g.prompts[p];
    BatchBuilder bb = kv.builder();
    kv.add(bb, seq, 0, table, 1);
    lm->model->forward(bb.batch(), kv.kv, logits.data());
    std::vector<int32_t> out;
    for (size_t i = 0; i < g.greedy[p].size(); ++i) {
      out.push_back(argmax(logits.data(), V));
      seq.push_back(out.back());
      bb.clear();
      kv.add(bb, std::span<const int32_t>(&seq.back(), 1), int32_t(seq.size() - 1), table, 1);
      lm->model->forward(bb.batch(), kv.kv, logits.data());
    }
    EXPECT_EQ(out, g.greedy[p]) << GetParam() << " prompt " << p;
  }
}

TEST_P(ModelGolden, BatchedChunkedAndSingleRunsAgree) {
  auto lm = load(dir(), 3);
  ASSERT_TRUE(lm);
  Golden g = read_golden(dir());
  const int64_t V = lm->config.vocab_size;
  GroupedCache kv(*lm, 32);
  std::vector<std::vector<int32_t>> tables = {{9, 2}, {0, 30, 4}, {11, 12, 5, 31}};
  std::vector<std::vector<float>> single;
  for (size_t p = 0; p < 3; ++p) single.push_back(full_logits(*lm, kv, g.prompts[p], tables[p]));

  // All three prompts in one flat batch.
  BatchBuilder bb = kv.builder();
  for (size_t p = 0; p < 3; ++p)
    kv.add(bb, g.prompts[p], 0, tables[p], g.prompts[p].size(), int32_t(p));
  std::vector<float> batched(bb.num_logits() * V);
  lm->model->forward(bb.batch(), kv.kv, batched.data());
  size_t row = 0;
  for (size_t p = 0; p < 3; ++p) {
    std::vector<float> part(batched.begin() + row * V,
                            batched.begin() + (row + g.prompts[p].size()) * V);
    row += g.prompts[p].size();
    EXPECT_LE(max_rel_err(part, single[p], V), 1e-5) << "prompt " << p;
    for (size_t r = 0; r < g.prompts[p].size(); ++r)
      EXPECT_EQ(argmax(&part[r * V], V), argmax(&single[p][r * V], V));
  }

  // The longest prompt in chunks of 7 tokens, each chunk attending to the cached ones.
  const auto& prompt = g.prompts[2];
  std::vector<float> chunked;
  for (size_t start = 0; start < prompt.size(); start += 7) {
    const size_t n = std::min<size_t>(7, prompt.size() - start);
    bb.clear();
    kv.add(bb, std::span<const int32_t>(prompt.data() + start, n), int32_t(start), tables[2], n, 2);
    std::vector<float> part(n * V);
    lm->model->forward(bb.batch(), kv.kv, part.data());
    chunked.insert(chunked.end(), part.begin(), part.end());
  }
  EXPECT_LE(max_rel_err(chunked, single[2], V), 1e-5);
}

// A PD producer's hold (ForwardBatch::state_holds): the state before a sequence's last token of
// the step lands in the hold slot, bit for bit the state a run that stops one token earlier
// leaves, whether that step has many tokens or only the last one.
TEST(HybridStateHold, TheHeldStateIsTheStateBeforeTheLastToken) {
  for (const char* name : {"qwen3_5_f32", "qwen3_next_f32", "qwen3_5_moe_bf16"}) {
    const std::string dir = test::fixtures_dir() + "/models/" + name;
    auto lm = load(dir);
    ASSERT_TRUE(lm);
    const std::vector<int32_t> prompt = read_golden(dir).prompts[2];
    const size_t n = prompt.size();
    GroupedCache c(*lm, 32);
    const std::span<const int32_t> all(prompt), head(prompt.data(), n - 1);
    auto run = [&](std::span<const int32_t> tokens, int32_t start, std::vector<int32_t> table,
                   int32_t slot, int32_t hold) {
      BatchBuilder bb = c.builder();
      bb.add(tokens, start, c.tables(table), 1, slot, 0, hold);
      std::vector<float> logits(size_t(lm->config.vocab_size));
      lm->model->forward(bb.batch(), c.kv, logits.data());
    };
    auto same_state = [&](int32_t a, int32_t b) {
      int layers = 0;
      for (int i = 0; i < int(lm->config.num_hidden_layers); ++i) {
        if (c.kv.place(i).group != KVCacheLayout::kStateGroup) continue;
        ++layers;
        const int64_t f = c.kv.layout().state.floats_per_layer;
        if (!std::equal(c.kv.state(i, a), c.kv.state(i, a) + f, c.kv.state(i, b))) return false;
      }
      return layers > 0;
    };
    run(head, 0, {0, 1, 2}, 1, -1);  // the reference: one token short
    run(all, 0, {3, 4, 5}, 0, 3);    // the whole prompt, holding into slot 3
    EXPECT_TRUE(same_state(3, 1)) << name << ": a step of " << n << " tokens";
    EXPECT_FALSE(same_state(0, 1)) << name;  // the slot itself went one token further
    // A step of the last token alone holds the state it starts from.
    run(head, 0, {6, 7, 8}, 2, -1);
    for (int i = 0; i < int(lm->config.num_hidden_layers); ++i)
      if (c.kv.place(i).group == KVCacheLayout::kStateGroup)
        std::fill_n(c.kv.state(i, 3), c.kv.layout().state.floats_per_layer, 7.0f);
    run(all.subspan(n - 1), int32_t(n - 1), {6, 7, 8}, 2, 3);
    EXPECT_TRUE(same_state(3, 1)) << name << ": a step of one token";
  }
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  const std::string root = test::fixtures_dir() + "/models";
  if (!std::filesystem::exists(root)) return names;
  for (const auto& e : std::filesystem::directory_iterator(root))
    if (std::filesystem::exists(e.path() / "golden.json")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGolden, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(ModelFixtures, AllExpectedArchitecturesPresent) {
  auto names = fixture_names();
  for (const char* want : {"llama3_f32",
                           "llama3_bf16",
                           "mistral_f32",
                           "mistral_bf16",
                           "qwen2_f32",
                           "qwen2_bf16",
                           "qwen2_sliding_f32",
                           "qwen3_f32",
                           "qwen3_bf16",
                           "qwen3_next_f32",
                           "qwen3_next_bf16",
                           "qwen3_5_f32",
                           "qwen3_5_bf16",
                           "qwen3_5_moe_f32",
                           "qwen3_5_moe_bf16",
                           "qwen3_w8a8_dynamic",
                           "qwen3_w8a8",
                           "qwen3_moe_w8a8_dynamic",
                           "qwen3_moe_w4a8_dynamic",
                           "qwen3_ct_w8a8_dynamic",
                           "qwen3_ct_w8a8_static",
                           "qwen3_w8a8c8",
                           "qwen3_w8a8_mxfp8kv",
                           "qwen3_ct_w8a8_fp8kv",
                           "deepseek_v3_w8a8_dynamic",
                           "deepseek_v32_f32",
                           "deepseek_v32_bf16",
                           "deepseek_v4_window_f32",
                           "deepseek_v4_window_bf16"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

}  // namespace
}  // namespace kestrel
