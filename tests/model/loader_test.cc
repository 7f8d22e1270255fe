// load_model: dummy weights, architecture and path errors, shape mismatches.
#include "model/loader.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/mmap_file.h"
#include "model/batch_builder.h"
#include "test_paths.h"

namespace kestrel {
namespace {
namespace fs = std::filesystem;

nlohmann::json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 96},
          {"hidden_size", 32},
          {"intermediate_size", 64},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"torch_dtype", "bfloat16"},
          {"eos_token_id", 2}};
}

std::string write_config_dir(const std::string& name, const nlohmann::json& cfg) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_loader_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << cfg.dump();
  return dir.string();
}

std::vector<float> run_dummy(const std::string& dir, uint64_t seed) {
  LoadOptions o;
  o.model = dir;
  o.load_format = "dummy";
  o.seed = seed;
  o.threads = 1;
  auto lm = load_model(o);
  EXPECT_TRUE(lm.ok()) << (lm.ok() ? "" : lm.error().message);
  if (!lm.ok()) return {};
  KVCacheStorage kv = (*lm)->model->make_kv_cache(2, 16);
  const std::vector<int32_t> ids = {1, 5, 7, 90};
  const std::vector<int32_t> table = {1, 0};
  BatchBuilder bb(16);
  bb.add(ids, 0, table, BatchBuilder::Logits::kLast);
  std::vector<float> logits(96);
  (*lm)->model->forward(bb.batch(), kv, logits.data());
  return logits;
}

TEST(Loader, DummyWeightsAreDeterministicAndFinite) {
  const std::string dir = write_config_dir("dummy", tiny_config());
  auto a = run_dummy(dir, 3), b = run_dummy(dir, 3), c = run_dummy(dir, 4);
  ASSERT_EQ(a.size(), 96u);
  for (float v : a) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Loader, UnsupportedArchitectureListsSupportedOnes) {
  auto cfg = tiny_config();
  cfg["architectures"] = {"MambaForCausalLM"};
  LoadOptions o;
  o.model = write_config_dir("arch", cfg);
  o.load_format = "dummy";
  auto lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("MambaForCausalLM"), std::string::npos);
  EXPECT_NE(lm.error().message.find("Qwen3ForCausalLM"), std::string::npos);
}

TEST(Loader, MissingPathAndBadFormat) {
  LoadOptions o;
  o.model = "/nonexistent/model/dir";
  auto lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("does not exist"), std::string::npos);
  o.model = write_config_dir("fmt", tiny_config());
  o.load_format = "pt";
  lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("--load-format"), std::string::npos);
}

TEST(Loader, KvCacheDtypeAndQuantComputeOptions) {
  LoadOptions o;
  o.model = write_config_dir("kvdtype", tiny_config());
  o.load_format = "dummy";
  for (auto [flag, want] : {std::pair{"auto", DType::BF16}, std::pair{"fp16", DType::F16},
                            std::pair{"fp32", DType::F32}}) {
    o.kv_cache_dtype = flag;
    auto lm = load_model(o);
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    EXPECT_EQ((*lm)->model->kv_cache_dtype(), want) << flag;
  }
  for (auto [flag, want] : {std::pair{"fp8", DType::F8_E4M3}, std::pair{"fp8_e4m3", DType::F8_E4M3},
                            std::pair{"fp8_e5m2", DType::F8_E5M2}}) {
    o.kv_cache_dtype = flag;
    auto lm = load_model(o);
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    EXPECT_EQ((*lm)->model->kv_cache_dtype(), want) << flag;
  }
  // An int8 cache needs a C8 checkpoint's scales; MXFP8 groups of 32 need head_dim % 32 == 0
  // (this config's is 8); scales are calculated only for fp8.
  o.kv_cache_dtype = "int8";
  auto lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("kv_cache_type C8"), std::string::npos) << lm.error().message;
  o.kv_cache_dtype = "mxfp8";
  lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("head_dim 8"), std::string::npos) << lm.error().message;
  o.kv_cache_dtype = "fp16";
  o.calculate_kv_scales = true;
  lm = load_model(o);
  ASSERT_TRUE(lm.ok()) << lm.error().message;
  o.calculate_kv_scales = false;
  o.kv_cache_dtype = "fp4";
  lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("--kv-cache-dtype 'fp4'"), std::string::npos);
  o.kv_cache_dtype = "auto";
  o.quant_compute = "int4";
  lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("--quant-compute"), std::string::npos);
}

TEST(Loader, ShapeMismatchNamesTheTensor) {
  const fs::path src = fs::path(test::fixtures_dir()) / "models" / "llama3_f32";
  ASSERT_TRUE(fs::exists(src)) << src << ": committed fixture missing";
  const fs::path dir = fs::temp_directory_path() / "kestrel_loader_shape";
  fs::create_directories(dir);
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  auto text = read_text_file((src / "config.json").string());
  ASSERT_TRUE(text.ok());
  auto cfg = nlohmann::json::parse(*text);
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() * 2;
  std::ofstream(dir / "config.json") << cfg.dump();
  LoadOptions o;
  o.model = dir.string();
  auto lm = load_model(o);
  ASSERT_FALSE(lm.ok());
  EXPECT_NE(lm.error().message.find("mlp.gate_proj.weight"), std::string::npos)
      << lm.error().message;
  EXPECT_NE(lm.error().message.find("expected"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
