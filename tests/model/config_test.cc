#include "model/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kestrel {
namespace {

// Expects `r` to fail with a message containing every substring in `parts`.
template <typename T>
void expect_error(const Expected<T>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << *parts.begin() << "'";
  for (const auto& p : parts)
    EXPECT_NE(r.error().message.find(p), std::string::npos)
        << "message '" << r.error().message << "' lacks '" << p << "'";
}

// Meta-Llama-3.1-8B-Instruct's config.json (transformers 4.42 era).
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 128256
})";

// Qwen2.5-0.5B-Instruct's config.json: no attention_bias key, Qwen2 always has q/k/v biases.
const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Minimal valid config; `extra` is spliced in as additional top-level members (later keys win).
std::string tiny(const std::string& extra = "") {
  std::string s = R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4)";
  if (!extra.empty()) s += ", " + extra;
  return s + "}";
}

TEST(ConfigJson, Llama31WithLlama3RopeScaling) {
  auto c = parse_config_json(kLlama31);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_hidden_layers, 32);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_dim, 128);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->rope_interleaved);
  EXPECT_EQ(c->hidden_act, "silu");
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->bos_token_id, 128000);
}

TEST(ConfigJson, Qwen2AlwaysHasAttentionBias) {
  auto c = parse_config_json(kQwen25);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151645});

  // Even an explicit false cannot turn Qwen2's biases off.
  auto forced = parse_config_json(tiny(R"("model_type": "qwen2", "attention_bias": false)"));
  ASSERT_TRUE(forced.ok()) << forced.error().message;
  EXPECT_TRUE(forced->attention_bias);
}

// Sliding windows as transformers assigns them: Mistral's on every layer, Qwen2's from
// max_window_layers on when use_sliding_window, layer_types over both; a null window or Qwen's
// use_sliding_window false (Qwen2.5's released configs) leaves full attention everywhere.
TEST(ConfigJson, SlidingWindowLayers) {
  auto windows = [](const std::string& extra) {
    auto c = parse_config_json(tiny(R"("num_hidden_layers": 4, )" + extra));
    EXPECT_TRUE(c.ok()) << c.error().message;
    std::vector<int32_t> w;
    for (int64_t l = 0; c.ok() && l < c->num_hidden_layers; ++l) w.push_back(c->sliding_window(l));
    return w;
  };
  using W = std::vector<int32_t>;
  EXPECT_EQ(windows(R"("model_type": "mistral", "sliding_window": 4096)"),
            (W{4096, 4096, 4096, 4096}));
  EXPECT_EQ(windows(R"("model_type": "mistral", "sliding_window": null)"), (W{0, 0, 0, 0}));
  EXPECT_EQ(windows(R"("model_type": "llama", "sliding_window": 64)"), (W{0, 0, 0, 0}));
  EXPECT_EQ(windows(R"("model_type": "qwen2", "sliding_window": 64, "use_sliding_window": true,
                       "max_window_layers": 1)"),
            (W{0, 64, 64, 64}));
  EXPECT_EQ(windows(R"("model_type": "qwen2", "sliding_window": 64, "use_sliding_window": false,
                       "max_window_layers": 1)"),
            (W{0, 0, 0, 0}));
  EXPECT_EQ(windows(R"("model_type": "qwen3", "sliding_window": 8, "use_sliding_window": true,
                       "max_window_layers": 3, "layer_types": ["sliding_attention",
                       "full_attention", "sliding_attention", "full_attention"])"),
            (W{8, 0, 8, 0}));
  EXPECT_EQ(windows(R"("model_type": "mistral", "sliding_window": 16, "layer_types":
                       ["full_attention", "full_attention", "sliding_attention",
                       "sliding_attention"])"),
            (W{0, 0, 16, 16}));
  expect_error(parse_config_json(tiny(R"("model_type": "mistral", "sliding_window": 16,
                                         "layer_types": ["full_attention"])")),
               {"layer_types", "one entry per hidden layer"});
  expect_error(parse_config_json(tiny(R"("model_type": "mistral", "sliding_window": 16,
                                         "layer_types": ["full_attention", "chunked"])")),
               {"layer_types"});
  expect_error(parse_config_json(tiny(R"("model_type": "mistral", "sliding_window": -3)")),
               {"sliding_window"});
}

TEST(ConfigJson, Qwen3ExplicitHeadDimAndQkNorm) {
  auto c = parse_config_json(tiny(R"("model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
      "head_dim": 32, "num_key_value_heads": 2)"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->head_dim, 32);  // not hidden / heads = 16
  EXPECT_EQ(c->rope_dim, 32);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
}

TEST(ConfigJson, LlamaAttentionBiasComesFromConfig) {
  auto c = parse_config_json(tiny(R"("attention_bias": true)"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
}

TEST(ConfigJson, DefaultsFilledByFinalize) {
  auto c = parse_config_json(tiny());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_dim, 16);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_TRUE(c->architecture.empty());
  EXPECT_TRUE(c->torch_dtype.empty());
}

TEST(ConfigJson, NullValuesCountAsAbsent) {
  auto c = parse_config_json(tiny(R"("rope_scaling": null, "head_dim": null,
      "eos_token_id": null, "bos_token_id": null, "num_key_value_heads": null)"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_FALSE(c->bos_token_id.has_value());
}

TEST(ConfigJson, PartialRotaryFactor) {
  auto c = parse_config_json(tiny(R"("partial_rotary_factor": 0.25)"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_dim, 4);
  auto explicit_hd = parse_config_json(tiny(R"("head_dim": 32, "partial_rotary_factor": 0.5)"));
  ASSERT_TRUE(explicit_hd.ok()) << explicit_hd.error().message;
  EXPECT_EQ(explicit_hd->rope_dim, 16);
  expect_error(parse_config_json(tiny(R"("partial_rotary_factor": 1.5)")),
               {"partial_rotary_factor"});
}

TEST(ConfigJson, YarnWithMscale) {
  // DeepSeek-V3's rope_scaling, integers where floats are meant included.
  auto c = parse_config_json(tiny(R"("max_position_embeddings": 163840, "rope_scaling": {
      "beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
      "original_max_position_embeddings": 4096, "type": "yarn"})"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  const RopeScaling& s = c->rope_scaling;
  EXPECT_EQ(s.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(s.factor, 40.0);
  EXPECT_DOUBLE_EQ(s.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(s.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(s.mscale, 1.0);
  EXPECT_DOUBLE_EQ(s.mscale_all_dim, 1.0);
  EXPECT_EQ(s.original_max_position_embeddings, 4096);
  EXPECT_FALSE(s.attention_factor.has_value());
  EXPECT_TRUE(s.truncate);
}

TEST(ConfigJson, YarnOptionalParameters) {
  auto c = parse_config_json(tiny(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 0.75, "truncate": false})"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  const RopeScaling& s = c->rope_scaling;
  EXPECT_DOUBLE_EQ(s.factor, 4.0);
  EXPECT_DOUBLE_EQ(s.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(s.beta_slow, 2.0);
  ASSERT_TRUE(s.attention_factor.has_value());
  EXPECT_DOUBLE_EQ(*s.attention_factor, 0.75);
  EXPECT_FALSE(s.truncate);
  EXPECT_EQ(s.original_max_position_embeddings, 0);  // 0 = use max_position_embeddings
  EXPECT_DOUBLE_EQ(s.mscale, 0.0);
}

TEST(ConfigJson, YarnFactorDerivedFromContextExtension) {
  auto c = parse_config_json(tiny(R"("max_position_embeddings": 131072,
      "rope_scaling": {"type": "yarn", "original_max_position_embeddings": 32768})"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
}

TEST(ConfigJson, LegacyTypeKeyLinearAndDynamic) {
  auto lin = parse_config_json(tiny(R"("rope_scaling": {"type": "linear", "factor": 2.0})"));
  ASSERT_TRUE(lin.ok()) << lin.error().message;
  EXPECT_EQ(lin->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(lin->rope_scaling.factor, 2.0);
  auto dyn = parse_config_json(tiny(R"("rope_scaling": {"rope_type": "dynamic", "factor": 3})"));
  ASSERT_TRUE(dyn.ok()) << dyn.error().message;
  EXPECT_EQ(dyn->rope_scaling.type, RopeScalingType::kDynamic);
  EXPECT_DOUBLE_EQ(dyn->rope_scaling.factor, 3.0);
  // rope_type wins over the legacy key.
  auto both = parse_config_json(
      tiny(R"("rope_scaling": {"type": "linear", "rope_type": "dynamic", "factor": 2})"));
  ASSERT_TRUE(both.ok()) << both.error().message;
  EXPECT_EQ(both->rope_scaling.type, RopeScalingType::kDynamic);
  for (const char* none : {"default", "none"}) {
    auto d =
        parse_config_json(tiny(std::string(R"("rope_scaling": {"rope_type": ")") + none + R"("})"));
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ(d->rope_scaling.type, RopeScalingType::kNone);
  }
}

TEST(ConfigJson, RopeParametersFromTransformers5) {
  // As written by transformers 5.x LlamaConfig.save_pretrained (dtype instead of torch_dtype).
  auto c = parse_config_json(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
    "dtype": "float32", "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "pad_token_id": null, "rms_norm_eps": 1e-06,
    "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_theta": 500000.0,
                        "rope_type": "llama3"},
    "tie_word_embeddings": false, "transformers_version": "5.24.0", "vocab_size": 256})");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c->bos_token_id, 1);

  auto plain = parse_config_json(
      tiny(R"("rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"})"));
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_DOUBLE_EQ(plain->rope_theta, 1e6);
  EXPECT_EQ(plain->rope_scaling.type, RopeScalingType::kNone);

  // Qwen3-Next style: the partial rotary factor lives inside rope_parameters.
  auto partial = parse_config_json(tiny(R"("rope_parameters": {"rope_theta": 10000,
      "rope_type": "default", "partial_rotary_factor": 0.5})"));
  ASSERT_TRUE(partial.ok()) << partial.error().message;
  EXPECT_EQ(partial->rope_dim, 8);
}

TEST(ConfigJson, TypeErrorsAreClear) {
  auto expect_message = [](const std::string& text, const std::string& message) {
    auto r = parse_config_json(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, message);
  };
  expect_message(tiny(R"("hidden_size": "64")"), "config.json: 'hidden_size' must be an integer");
  expect_message(tiny(R"("hidden_size": 64.5)"), "config.json: 'hidden_size' must be an integer");
  expect_message(tiny(R"("vocab_size": 18446744073709551615)"),
                 "config.json: 'vocab_size' must be an integer");
  expect_message(tiny(R"("rms_norm_eps": "1e-5")"), "config.json: 'rms_norm_eps' must be a number");
  expect_message(tiny(R"("tie_word_embeddings": 1)"),
                 "config.json: 'tie_word_embeddings' must be a boolean");
  expect_message(tiny(R"("hidden_act": 3)"), "config.json: 'hidden_act' must be a string");
  expect_message(tiny(R"("architectures": "LlamaForCausalLM")"),
                 "config.json: 'architectures' must be a list of strings");
  expect_message(tiny(R"("architectures": [7])"),
                 "config.json: 'architectures' must be a list of strings");
  expect_message(tiny(R"("eos_token_id": [1, "2"])"),
                 "config.json: 'eos_token_id' must be an integer or a list of integers");
  expect_message(tiny(R"("eos_token_id": "2")"),
                 "config.json: 'eos_token_id' must be an integer or a list of integers");
  expect_message(tiny(R"("rope_scaling": "llama3")"),
                 "config.json: 'rope_scaling' must be an object");
  expect_message(tiny(R"("rope_scaling": {"rope_type": "linear", "factor": "2"})"),
                 "config.json: 'rope_scaling.factor' must be a number");
  expect_message(tiny(R"("rope_parameters": {"rope_type": "yarn", "factor": 2, "truncate": 0})"),
                 "config.json: 'rope_parameters.truncate' must be a boolean");
  expect_message(tiny(R"("rope_scaling": {"rope_type": 5})"),
                 "config.json: 'rope_scaling.rope_type' must be a string");
}

TEST(ConfigJson, MalformedJson) {
  expect_error(parse_config_json("{\"hidden_size\": "), {"config.json", "invalid JSON"});
  expect_error(parse_config_json(""), {"config.json", "invalid JSON"});
  expect_error(parse_config_json(tiny(R"("rope_theta": 1e999)")), {"config.json", "invalid JSON"});
  expect_error(parse_config_json("[1, 2]"), {"config.json", "not a JSON object"});
}

TEST(ConfigJson, FinalizeErrors) {
  expect_error(parse_config_json(R"({"hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4})"),
               {"config.json", "'vocab_size' must be a positive integer (got 0)"});
  expect_error(parse_config_json(tiny(R"("num_hidden_layers": 0)")), {"'num_hidden_layers'"});
  expect_error(parse_config_json(tiny(R"("intermediate_size": -5)")), {"'intermediate_size'"});
  expect_error(parse_config_json(tiny(R"("num_key_value_heads": 3)")),
               {"num_attention_heads 4 is not a multiple of num_key_value_heads 3"});
  expect_error(parse_config_json(tiny(R"("num_attention_heads": 5)")),
               {"hidden_size 64 is not divisible by num_attention_heads 5"});
  expect_error(parse_config_json(tiny(R"("hidden_act": "gelu")")),
               {"unsupported hidden_act 'gelu'", "silu"});
  expect_error(parse_config_json(tiny(R"("rms_norm_eps": 0)")), {"rms_norm_eps"});
  expect_error(parse_config_json(tiny(R"("rope_theta": -1)")), {"rope_theta"});
}

TEST(ConfigJson, RopeScalingErrors) {
  auto r = parse_config_json(tiny(R"("rope_scaling": {"rope_type": "longrope", "factor": 2})"));
  expect_error(r, {"config.json", "'longrope'", "default", "linear", "dynamic", "llama3", "yarn"});
  expect_error(parse_config_json(tiny(R"("rope_scaling": {"type": "mystery"})")), {"'mystery'"});
  expect_error(parse_config_json(tiny(R"("rope_scaling": {"rope_type": "linear"})")),
               {"'rope_scaling.factor' is required", "linear"});
  expect_error(parse_config_json(tiny(R"("rope_parameters": {"rope_type": "yarn"})")),
               {"'rope_parameters.factor' is required", "yarn"});
  expect_error(parse_config_json(tiny(R"("rope_scaling": {"rope_type": "linear", "factor": 0})")),
               {"factor must be positive"});
  expect_error(parse_config_json(tiny(R"("rope_scaling": {"rope_type": "llama3", "factor": 8,
      "low_freq_factor": 4, "high_freq_factor": 4})")),
               {"high_freq_factor"});
}

TEST(ConfigJson, FinalizeOnHandBuiltConfig) {
  // The GGUF path fills the struct directly and relies on finalize for defaults.
  ModelConfig c;
  c.vocab_size = 100;
  c.hidden_size = 96;
  c.intermediate_size = 200;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 6;
  ASSERT_TRUE(c.finalize().ok());
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.num_key_value_heads, 6);
  c.rope_dim = 18;
  Status st = c.finalize();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("within head_dim 16"), std::string::npos) << st.message();
}

TEST(ConfigJson, LoadFromFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kestrel_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "config.json").string();
  const std::string bad = (dir / "bad.json").string();
  std::ofstream(good) << kQwen25;
  std::ofstream(bad) << tiny(R"("hidden_size": true)");
  auto c = load_config_json(good);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->hidden_size, 896);
  expect_error(load_config_json(bad), {bad + ": 'hidden_size' must be an integer"});
  expect_error(load_config_json((dir / "absent.json").string()), {"absent.json"});
  std::filesystem::remove_all(dir);
}

TEST(GenerationConfigJson, AllFields) {
  auto g = parse_generation_config_json(R"({
    "bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
    "pad_token_id": 151643, "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20,
    "top_p": 0.8, "min_p": 0, "max_new_tokens": 512, "transformers_version": "4.37.0"})");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_DOUBLE_EQ(*g->temperature, 0.7);
  EXPECT_DOUBLE_EQ(*g->top_p, 0.8);
  EXPECT_EQ(*g->top_k, 20);
  ASSERT_TRUE(g->min_p.has_value());
  EXPECT_DOUBLE_EQ(*g->min_p, 0.0);
  EXPECT_DOUBLE_EQ(*g->repetition_penalty, 1.05);
  EXPECT_EQ(*g->max_new_tokens, 512);
}

TEST(GenerationConfigJson, AbsentAndNullFieldsStayUnset) {
  auto g = parse_generation_config_json(R"({"eos_token_id": 2, "temperature": null})");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(g->temperature.has_value());
  EXPECT_FALSE(g->top_p.has_value());
  EXPECT_FALSE(g->top_k.has_value());
  EXPECT_FALSE(g->min_p.has_value());
  EXPECT_FALSE(g->repetition_penalty.has_value());
  EXPECT_FALSE(g->max_new_tokens.has_value());
  auto empty = parse_generation_config_json("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->eos_token_ids.empty());
}

TEST(GenerationConfigJson, Errors) {
  auto top_k = parse_generation_config_json(R"({"top_k": 20.5})");
  ASSERT_FALSE(top_k.ok());
  EXPECT_EQ(top_k.error().message, "generation_config.json: 'top_k' must be an integer");
  expect_error(parse_generation_config_json(R"({"temperature": "hot"})"),
               {"generation_config.json: 'temperature' must be a number"});
  expect_error(parse_generation_config_json(R"({"eos_token_id": [true]})"), {"'eos_token_id'"});
  expect_error(parse_generation_config_json("not json"),
               {"generation_config.json", "invalid JSON"});
  expect_error(parse_generation_config_json("3"), {"not a JSON object"});
}

}  // namespace
}  // namespace kestrel
