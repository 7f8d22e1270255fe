// config.json of the hybrid Qwen3-Next / Qwen3.5 families: the layer pattern, the Gated DeltaNet
// widths, the vision-language wrapper's text_config and tensor prefix, their MoE rules, the
// errors; and the KV layout they give (attention layers in block groups, linear-attention
// layers in state slots). Gemma3's sliding/full pattern, two RoPE bases and scalings too.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/kv_layout.h"

namespace kestrel {
namespace {

// Shaped like a released Qwen3.5-MoE checkpoint (a vision-language wrapper), 8 layers.
const char* kQwen35MoeVl = R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"],
  "model_type": "qwen3_5_moe",
  "tie_word_embeddings": false,
  "text_config": {
    "model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048,
    "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 2,
    "head_dim": 256, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "full_attention_interval": 4,
    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "dtype": "bfloat16", "eos_token_id": 248044,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                        "mrope_interleaved": true}
  },
  "vision_config": {"depth": 27, "hidden_size": 1152}
})";

TEST(HybridConfig, VisionLanguageWrapperReadsItsTextConfig) {
  auto c = parse_config_json(kQwen35MoeVl);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "Qwen3_5MoeForConditionalGeneration");
  EXPECT_EQ(c->model_type, "qwen3_5_moe_text");
  EXPECT_EQ(c->weight_prefix, "model.language_model.");
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->layer_linear, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(c->linear.conv_dim(), 2 * 16 * 128 + 32 * 128);
  EXPECT_FALSE(c->linear.fused_projections);
  EXPECT_EQ(c->rope_dim, 64);  // 256 · 0.25; mRoPE is plain partial RoPE for text
  EXPECT_TRUE(c->attn_output_gate && c->norm_offset && c->qk_norm);
  // Every layer MoE, always renormalised; no dense width needed.
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 512);
  for (int64_t l = 0; l < 8; ++l) EXPECT_TRUE(c->moe.is_moe_layer(l)) << l;
  EXPECT_EQ(c->intermediate_size, 0);
}

TEST(HybridConfig, Qwen3NextLayerTypesAndFusedProjections) {
  auto c = parse_config_json(R"({
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "layer_types": ["linear_attention", "full_attention", "full_attention"],
    "full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 3,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 16, "norm_topk_prob": false, "mlp_only_layers": [1],
    "max_position_embeddings": 256})");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->weight_prefix, "model.");
  // layer_types wins over full_attention_interval.
  EXPECT_EQ(c->layer_linear, (std::vector<bool>{true, false, false}));
  EXPECT_TRUE(c->linear.fused_projections);
  EXPECT_EQ(c->rope_dim, 8);  // the default partial_rotary_factor 0.25
  EXPECT_FALSE(c->moe.norm_topk_prob);
  EXPECT_TRUE(c->moe.is_moe_layer(0));
  EXPECT_FALSE(c->moe.is_moe_layer(1));
  // conv inputs [2·32 + 32 channels, kernel - 1] then 4 recurrent [16, 8] matrices.
  EXPECT_EQ(c->linear.state_floats(), (2 * 32 + 32) * 2 + 4 * 16 * 8);

  const KVCacheLayout l = model_kv_cache_layout(*c, DType::BF16, 16);
  ASSERT_EQ(l.groups.size(), 1u);
  EXPECT_EQ(l.group_layers[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(l.state.num_layers, 1);
  EXPECT_EQ(l.state.floats_per_layer, c->linear.state_floats());
  EXPECT_EQ(l.state.bytes_per_slot(), c->linear.state_floats() * 4);
  EXPECT_EQ(l.layers[0], (LayerPlace{KVCacheLayout::kStateGroup, 0}));
  EXPECT_EQ(l.layers[2], (LayerPlace{0, 1}));
}

TEST(HybridConfig, MalformedHybridConfigsAreRefused) {
  const std::string head = R"({"model_type": "qwen3_5_text", "vocab_size": 512,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "max_position_embeddings": 256, )";
  auto bad = [&](const std::string& tail) { return parse_config_json(head + tail + "}"); };
  auto expect_error = [](const Expected<ModelConfig>& r, const std::string& part) {
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
  };
  expect_error(bad(R"("layer_types": ["linear_attention", "sliding_attention"])"),
               "\"full_attention\" or \"linear_attention\"");
  expect_error(bad(R"("layer_types": ["linear_attention"])"), "one entry per hidden layer");
  expect_error(bad(R"("layer_types": ["linear_attention", "linear_attention"])"),
               "at least one must attend");
  expect_error(bad(R"("linear_num_key_heads": 3, "linear_num_value_heads": 4)"),
               "not a multiple of linear_num_key_heads");
  expect_error(bad(R"("linear_conv_kernel_dim": 1)"), "at least 2");
  expect_error(bad(R"("full_attention_interval": 0)"), "must be positive");
}

// Shaped like the released gemma-3-270m (transformers 4.5x keys: no layer_types, flat RoPE
// bases).
TEST(HybridConfig, Gemma3SlidingPatternRopeBasesAndScalings) {
  auto c = parse_config_json(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
    "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 12,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
    "query_pre_attn_scalar": 256, "sliding_window": 512, "sliding_window_pattern": 6,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": null,
    "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": null,
    "attn_logit_softcapping": null, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6})");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_TRUE(c->tie_word_embeddings && c->scale_embeddings && c->sandwich_norms);
  EXPECT_TRUE(c->norm_offset && c->qk_norm);
  EXPECT_EQ(c->query_pre_attn_scalar, 256);
  EXPECT_EQ(c->final_logit_softcapping, 0);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_local_theta, 1e4);
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(c->sliding_window(l), (l + 1) % 6 == 0 ? 0 : 512) << l;

  // transformers 5.x: layer_types and RoPE per layer type.
  auto five = parse_config_json(R"({
    "model_type": "gemma3_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 16, "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": 30.0,
    "max_position_embeddings": 256,
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0,
                                           "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})");
  ASSERT_TRUE(five.ok()) << five.error().message;
  EXPECT_EQ(five->sliding_window(0), 8);
  EXPECT_EQ(five->sliding_window(1), 0);
  EXPECT_EQ(five->rope_scaling.type, RopeScalingType::kLinear);  // the full layers'
  EXPECT_EQ(five->rope_local_theta, 1e4);
  EXPECT_EQ(five->final_logit_softcapping, 30.0);

  auto softcapped = parse_config_json(R"({"model_type": "gemma3_text", "vocab_size": 512,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "max_position_embeddings": 256, "attn_logit_softcapping": 50.0})");
  ASSERT_FALSE(softcapped.ok());
  EXPECT_NE(softcapped.error().message.find("attn_logit_softcapping"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
