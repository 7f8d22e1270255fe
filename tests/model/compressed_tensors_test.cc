// compressed-tensors int8 W8A8 checkpoints (ModelConfig::compressed_tensors): the token-dynamic
// and tensor-static fixtures hold the same codes and scales as their msModelSlim twins, so they
// give bit-identical logits; config groups other than int8 W8A8 are refused naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/batch_builder.h"
#include "model/config.h"
#include "model/loader.h"
#include "prompt_logits.h"

namespace kestrel {
namespace {

TEST(CompressedTensors, FixturesGiveTheirMsModelSlimTwinsLogitsBitForBit) {
  const std::vector<int32_t> prompt = {258, 286, 374, 349, 173, 117, 441, 47, 488, 248, 182};
  for (const auto& [ct, twin] : {std::pair{"qwen3_ct_w8a8_dynamic", "qwen3_w8a8_dynamic"},
                                 std::pair{"qwen3_ct_w8a8_static", "qwen3_w8a8"}}) {
    SCOPED_TRACE(ct);
    const std::vector<float> a = prompt_logits(fixture(ct), prompt),
                             b = prompt_logits(fixture(twin), prompt);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b);
  }
}

// config.json with `quantization_config` replaced by `q`.
Expected<ModelConfig> with_quantization(const nlohmann::json& q) {
  std::ifstream in(fixture("qwen3_ct_w8a8_dynamic") + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["quantization_config"] = q;
  return parse_config_json(c.dump());
}

TEST(CompressedTensors, OnlyInt8W8A8IsAccepted) {
  std::ifstream in(fixture("qwen3_ct_w8a8_dynamic") + "/config.json");
  const nlohmann::json good = nlohmann::json::parse(in)["quantization_config"];
  auto ok = with_quantization(good);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_TRUE(ok->compressed_tensors.enabled);
  EXPECT_TRUE(ok->compressed_tensors.dynamic_activations);
  auto refused = [&](auto edit) {
    nlohmann::json q = good;
    edit(q);
    auto r = with_quantization(q);
    return r.ok() ? std::string() : r.error().message;
  };
  EXPECT_NE(refused([](auto& q) { q["format"] = "pack-quantized"; }).find("pack-quantized"),
            std::string::npos);
  EXPECT_NE(refused([](auto& q) {
              q["kv_cache_scheme"] = {{"num_bits", 8}};
            }).find("kv_cache"),
            std::string::npos);
  // An FP8 kv_cache_scheme (per tensor or per attention head) is read; int8 or dynamic ones are
  // not.
  EXPECT_FALSE(ok->compressed_tensors.fp8_kv_scales);
  std::ifstream fp8_in(fixture("qwen3_ct_w8a8_fp8kv") + "/config.json");
  const nlohmann::json fp8 = nlohmann::json::parse(fp8_in)["quantization_config"];
  for (const char* strategy : {"attn_head", "tensor"}) {
    nlohmann::json q = fp8;
    q["kv_cache_scheme"]["strategy"] = strategy;
    auto with_kv = with_quantization(q);
    ASSERT_TRUE(with_kv.ok()) << with_kv.error().message;
    EXPECT_TRUE(with_kv->compressed_tensors.fp8_kv_scales);
  }
  for (auto [field, value] :
       {std::pair{"type", nlohmann::json("int")}, std::pair{"dynamic", nlohmann::json(true)},
        std::pair{"strategy", nlohmann::json("channel")}}) {
    nlohmann::json q = fp8;
    q["kv_cache_scheme"][field] = value;
    auto r = with_quantization(q);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_NE(r.error().message.find("kv_cache_scheme"), std::string::npos);
  }
  EXPECT_NE(refused([](auto& q) {
              q["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
            }).find("weights"),
            std::string::npos);
  EXPECT_NE(refused([](auto& q) {
              q["config_groups"]["group_0"]["input_activations"]["strategy"] = "group";
            }).find("input_activations"),
            std::string::npos);
  EXPECT_NE(refused([](auto& q) {
              q["config_groups"]["group_1"] = q["config_groups"]["group_0"];
            }).find("one group"),
            std::string::npos);
}

}  // namespace
}  // namespace kestrel
