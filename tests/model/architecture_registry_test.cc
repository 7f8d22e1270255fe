// The architecture registry: which family file serves each Hugging Face architecture name, and
// configs that ask a family for what it does not implement.
#include "model/arch/registry.h"

#include <gtest/gtest.h>

#include "model/config.h"

namespace kestrel {
namespace {

// A small config of `model_type` with `extra` keys, served as `architecture`.
ModelConfig config(const std::string& architecture, const std::string& model_type,
                   const std::string& extra = "") {
  const std::string text = R"({"architectures": [")" + architecture + R"("], "model_type": ")" +
                           model_type + R"(", "vocab_size": 64, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "max_position_embeddings": 128)" +
                           extra + "}";
  auto c = parse_config_json(text);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? *c : ModelConfig{};
}

const char* kMla = R"(, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1,
    "topk_group": 1, "moe_intermediate_size": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8, "v_head_dim": 8, "q_lora_rank": 16)";

TEST(ArchitectureRegistry, EachArchitectureHasItsFamilyFile) {
  const std::pair<const char*, const char*> expected[] = {
      {"LlamaForCausalLM", "llama"},
      {"MistralForCausalLM", "llama"},
      {"Qwen2ForCausalLM", "llama"},
      {"Qwen3ForCausalLM", "llama"},
      {"Qwen3MoeForCausalLM", "qwen3_moe"},
      {"DeepseekV3ForCausalLM", "deepseek_v3"},
      {"DeepseekV32ForCausalLM", "deepseek_v3"},
      {"Qwen3NextForCausalLM", "qwen3_next"},
      {"Qwen3_5ForCausalLM", "qwen3_next"},
      {"Qwen3_5MoeForConditionalGeneration", "qwen3_next"},
      {"Gemma3ForCausalLM", "gemma3"},
      {"DeepseekV4ForCausalLM", "deepseek_v4"}};
  for (const auto& [arch, family] : expected) EXPECT_EQ(architecture_family(arch), family) << arch;
  EXPECT_EQ(architecture_family("MambaForCausalLM"), "");
  EXPECT_EQ(architecture_family(""), "");
  // The list error messages print holds exactly the names a family serves.
  for (const std::string& a : supported_architectures()) EXPECT_NE(architecture_family(a), "") << a;
  EXPECT_EQ(supported_architectures().size(), 14u);
}

TEST(ArchitectureRegistry, ConfigsItsFamilyImplementsPass) {
  EXPECT_TRUE(check_architecture(config("LlamaForCausalLM", "llama")).ok());
  EXPECT_TRUE(
      check_architecture(config("MistralForCausalLM", "mistral", R"(, "sliding_window": 4)")).ok());
  EXPECT_TRUE(check_architecture(config("DeepseekV3ForCausalLM", "deepseek_v3", kMla)).ok());
}

TEST(ArchitectureRegistry, RefusesWhatTheFamilyDoesNotImplement) {
  // DeepSeek's latent attention and experts under a Llama name.
  const Status mla = check_architecture(config("LlamaForCausalLM", "deepseek_v3", kMla));
  ASSERT_FALSE(mla.ok());
  EXPECT_NE(mla.message().find("LlamaForCausalLM"), std::string::npos) << mla.message();
  EXPECT_NE(mla.message().find("routed experts"), std::string::npos) << mla.message();
  EXPECT_NE(mla.message().find("llama architecture family"), std::string::npos) << mla.message();
  // Qwen3-MoE experts under the dense Qwen3 name.
  const Status moe = check_architecture(config("Qwen3ForCausalLM", "qwen3_moe",
                                               R"(, "num_experts": 4, "num_experts_per_tok": 2,
                                                  "moe_intermediate_size": 16)"));
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.message().find("routed experts"), std::string::npos) << moe.message();
  // Gemma's sandwich norms under DeepSeek's name: MLA is fine there, the norms are not.
  const Status gemma = check_architecture(config("DeepseekV3ForCausalLM", "gemma3_text"));
  ASSERT_FALSE(gemma.ok());
  EXPECT_NE(gemma.message().find("deepseek_v3 architecture family"), std::string::npos)
      << gemma.message();
  // An unknown name lists the known ones.
  const Status unknown = check_architecture(config("MambaForCausalLM", "llama"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("'MambaForCausalLM' is not supported"), std::string::npos);
  EXPECT_NE(unknown.message().find("Gemma3ForCausalLM"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
