// DeepSeek-V4 in the model: its config in transformers' form and the released form, and what
// is refused by name at load (compressed-attention layers, tensor parallelism). Logits, greedy
// decoding, batching and chunking across the window against transformers are the golden
// suite's (model_golden_test.cc) over the deepseek_v4_window fixtures.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fixture_config.h"
#include "model/config.h"
#include "model/loader.h"

namespace kestrel {
namespace {

nlohmann::json config_of(const std::string& name) {
  return test::fixture_config(name);
}

TEST(DeepseekV4Config, TransformersKeys) {
  auto c = parse_config_json(config_of("deepseek_v4_window_f32").dump());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "DeepseekV4ForCausalLM");
  EXPECT_TRUE(c->dsv4.enabled());
  EXPECT_EQ(c->dsv4.hc_mult, 4);
  EXPECT_EQ(c->dsv4.o_groups, 2);
  EXPECT_EQ(c->dsv4.o_lora_rank, 16);
  EXPECT_EQ(c->dsv4.q_lora_rank, 32);
  EXPECT_EQ(c->dsv4.compress_ratios, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(c->num_key_value_heads, 1);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->rope_dim, 8);  // the last 8 of each head
  EXPECT_TRUE(c->rope_interleaved);
  EXPECT_EQ(c->layer_sliding_window, (std::vector<int32_t>{6, 6, 6}));
  EXPECT_EQ(c->moe.router, MoeConfig::Router::kSqrtSoftplus);
  EXPECT_TRUE(c->moe.is_hash_layer(0));
  EXPECT_FALSE(c->moe.is_hash_layer(1));
  EXPECT_DOUBLE_EQ(c->moe.swiglu_limit, 0.5);
  for (int64_t l = 0; l < 3; ++l) EXPECT_TRUE(c->moe.is_moe_layer(l));
}

// A released config.json: compress_ratios (with the MTP layer's entry), num_hash_layers, the
// compressed layers' yarn in rope_scaling.
TEST(DeepseekV4Config, ReleasedKeys) {
  const char* text = R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 16,
    "o_groups": 2, "o_lora_rank": 8, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 16, "max_position_embeddings": 1024, "sliding_window": 128,
    "compress_ratios": [0, 0, 4, 128, 0], "num_hash_layers": 2, "rope_theta": 10000,
    "compress_rope_theta": 160000, "rope_scaling": {"type": "yarn", "factor": 16,
    "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}})";
  auto c = parse_config_json(text);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->dsv4.compress_ratios, (std::vector<int32_t>{0, 0, 4, 128}));
  EXPECT_TRUE(c->moe.is_hash_layer(1));
  EXPECT_FALSE(c->moe.is_hash_layer(2));
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);  // window layers: plain RoPE
  EXPECT_EQ(c->dsv4.compress_rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c->dsv4.compress_rope_theta, 160000);
  EXPECT_EQ(c->rope_dim, 8);
}

TEST(DeepseekV4Config, RefusesWhatItCannotServe) {
  auto refused = [](nlohmann::json j, const std::string& what) {
    auto c = parse_config_json(j.dump());
    ASSERT_FALSE(c.ok()) << what;
    EXPECT_NE(c.error().message.find(what), std::string::npos) << c.error().message;
  };
  nlohmann::json j = config_of("deepseek_v4_window_f32");
  j["num_key_value_heads"] = 2;
  refused(j, "one shared KV head");
  j = config_of("deepseek_v4_window_f32");
  j["scoring_func"] = "softmax";
  refused(j, "scoring_func 'softmax'");
  j = config_of("deepseek_v4_window_f32");
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  refused(j, "\"full_attention\" is not a DeepSeek-V4 one");
  j = config_of("deepseek_v4_window_f32");
  j["o_groups"] = 3;
  refused(j, "o_groups 3");
}

// Compressed layers are refused at load, naming the layer.
TEST(DeepseekV4Load, CompressedLayersAreRefusedByName) {
  LoadOptions o;
  o.model = test::edited_fixture(
      "deepseek_v4_window_f32",
      {{"layer_types", {"sliding_attention", "compressed_sparse_attention", "sliding_attention"}}});
  auto m = load_model(o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("layer 1 is a compressed-attention layer"), std::string::npos)
      << m.error().message;
}

}  // namespace
}  // namespace kestrel
