// DeepSeek-V3.2 (DeepSeek Sparse Attention) in the model: its config keys and refusals, the
// indexer keys in the latent cache rows, queries with fewer keys than index_topk attending
// densely, and the indexer's choice mattering past them. Logits, greedy decoding, batching,
// chunking and MTP against transformers are the golden suites' (model_golden_test.cc,
// moe_mla_test.cc) over the deepseek_v32 fixtures.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "base/mmap_file.h"
#include "fixture_config.h"
#include "model/batch_builder.h"
#include "model/config.h"
#include "model/loader.h"

namespace kestrel {
namespace {

std::string fixture(const std::string& name) {
  return test::model_fixture(name);
}

nlohmann::json config_of(const std::string& name) {
  return test::fixture_config(name);
}

std::vector<int32_t> prompt_of(const std::string& name, size_t i) {
  auto text = read_text_file(fixture(name) + "/golden.json");
  EXPECT_TRUE(text.ok());
  return nlohmann::json::parse(*text).at("prompts").at(i).get<std::vector<int32_t>>();
}

std::unique_ptr<LoadedModel> load(const std::string& dir, const std::string& kv = "auto") {
  LoadOptions o;
  o.model = dir;
  o.threads = 2;
  o.kv_cache_dtype = kv;
  auto m = load_model(o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<float> logits_of(LoadedModel& lm, const std::vector<int32_t>& prompt) {
  KVCacheStorage kv = lm.model->make_kv_cache(4, 16);
  BatchBuilder bb(16);
  bb.add(prompt, 0, std::vector<int32_t>{2, 0, 3}, prompt.size());
  std::vector<float> out(prompt.size() * size_t(lm.config.vocab_size));
  lm.model->forward(bb.batch(), kv, out.data());
  return out;
}

TEST(DeepseekV32Config, IndexerKeysAndLayerKinds) {
  auto c = parse_config_json(config_of("deepseek_v32_f32").dump());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "DeepseekV32ForCausalLM");
  EXPECT_TRUE(c->indexer.enabled());
  EXPECT_EQ(c->indexer.num_heads, 16);
  EXPECT_EQ(c->indexer.head_dim, 32);
  EXPECT_EQ(c->indexer.top_k, 8);
  // mlp_layer_types ["dense", "sparse"] decides where the experts are.
  EXPECT_FALSE(c->moe.is_moe_layer(0));
  EXPECT_TRUE(c->moe.is_moe_layer(1));
  // A latent row: latent 32, rope key 8, indexer key 32.
  EXPECT_EQ(c->latent_cache_width(), 72);
}

TEST(DeepseekV32Config, RefusesWhatItCannotServe) {
  auto refused = [](nlohmann::json j, const std::string& what) {
    auto c = parse_config_json(j.dump());
    ASSERT_FALSE(c.ok()) << what;
    EXPECT_NE(c.error().message.find(what), std::string::npos) << c.error().message;
  };
  nlohmann::json j = config_of("deepseek_v32_f32");
  j["index_topk"] = 0;
  refused(j, "'index_topk' must be a positive integer");
  j = config_of("deepseek_v32_f32");
  j["index_head_dim"] = 4;  // narrower than the 8 rotated dims
  refused(j, "index_head_dim 4");
  j = config_of("deepseek_v32_f32");
  j["q_lora_rank"] = nullptr;
  refused(j, "q_lora_rank");
  j = config_of("deepseek_v32_f32");
  j["layer_types"] = {"indexed_attention", "sliding_attention"};
  refused(j, "\"sliding_attention\"");
  j = config_of("deepseek_v32_f32");
  j["mlp_layer_types"] = {"dense", "moe"};
  refused(j, "mlp_layer_types");
}

TEST(DeepseekV32Cache, RowsHoldLatentRopeKeyAndIndexerKey) {
  auto lm = load(fixture("deepseek_v32_f32"));
  ASSERT_TRUE(lm);
  KVCacheStorage kv = lm->model->make_kv_cache(8, 16);
  EXPECT_TRUE(kv.latent());
  EXPECT_EQ(kv.bytes(), size_t(lm->config.num_hidden_layers * 8 * 16 * 72 * 4));
  const MlaCacheLayer layer = kv.mla_layer(0, 32, 8);
  EXPECT_EQ(layer.index_dim, 32);
  // An 8-bit cache would need the indexer keys' own format: refused by name at load.
  LoadOptions o;
  o.model = fixture("deepseek_v32_f32");
  o.kv_cache_dtype = "fp8";
  auto fp8 = load_model(o);
  ASSERT_FALSE(fp8.ok());
  EXPECT_NE(fp8.error().message.find("indexer keys"), std::string::npos) << fp8.error().message;
}

// A query with no more keys than index_topk keeps them all: with a top-k wider than any prompt
// the model is dense MLA, and its logits at those positions are the same bits. Past them the
// indexer drops keys, which must change the logits.
TEST(DeepseekV32Forward, DenseWithinTopKSparseBeyond) {
  for (const char* name : {"deepseek_v32_f32", "deepseek_v32_bf16"}) {
    auto sparse = load(fixture(name));
    auto dense = load(test::edited_fixture(name, {{"index_topk", 4096}}));
    ASSERT_TRUE(sparse && dense);
    const std::vector<int32_t> prompt = prompt_of(name, 2);
    const int64_t V = sparse->config.vocab_size, k = sparse->config.indexer.top_k;
    ASSERT_GT(int64_t(prompt.size()), k + 8);
    const std::vector<float> a = logits_of(*sparse, prompt), b = logits_of(*dense, prompt);
    EXPECT_TRUE(std::equal(a.begin(), a.begin() + k * V, b.begin())) << name;
    double moved = 0;
    for (size_t i = size_t(k * V); i < a.size(); ++i)
      moved = std::max(moved, double(std::fabs(a[i] - b[i])));
    EXPECT_GT(moved, 1e-2) << name << ": the indexer's choice changed nothing";
  }
}

}  // namespace
}  // namespace kestrel
