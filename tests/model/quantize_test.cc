// `kestrel quantize` (model/quantize.h): quantizing the f32 Qwen3 fixture reproduces the
// committed W8A8_DYNAMIC fixture tensor for tensor and byte for byte (tools/make_modelslim_
// fixtures.py does the same math in numpy), so it serves the same logits; a bf16 checkpoint
// quantizes too; what it cannot convert is refused with the reason.
#include "model/quantize.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "logit_error.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "model/modelslim.h"
#include "prompt_logits.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("quantize_test_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

QuantizeOptions options(const std::string& in, const fs::path& out) {
  QuantizeOptions o;
  o.input = in;
  o.output = out.string();
  o.threads = 2;
  return o;
}

// The checkpoint quantize writes from `source` equals the numpy-made fixture `want`, tensor for
// tensor and byte for byte, and serves the same logits.
void expect_same_checkpoint(const std::string& source, const std::string& want, int quantized,
                            const std::string& type = "W8A8_DYNAMIC") {
  TempDir out;
  QuantizeOptions o = options(fixture(source), out.path);
  o.quant_type = type;
  auto r = quantize_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->quantized, quantized);
  const std::string want_dir = fixture(want);
  auto got = SafetensorsFile::open((out.path / "quant_model_weights.safetensors").string());
  auto want = SafetensorsFile::open(want_dir + "/quant_model_weights.safetensors");
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ((*got)->entries().size(), (*want)->entries().size());
  for (const SafetensorsEntry& e : (*want)->entries()) {
    SCOPED_TRACE(e.name);
    auto a = (*got)->tensor(e.name);
    auto b = (*want)->tensor(e.name);
    ASSERT_TRUE(a.ok()) << a.error().message;
    EXPECT_EQ(a->dtype, b->dtype);
    EXPECT_EQ(a->shape.ndim, b->shape.ndim);
    ASSERT_EQ(a->nbytes(), b->nbytes());
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes()), 0);
  }
  const nlohmann::json d = read_json(out.path / kModelSlimDescriptionFile);
  const nlohmann::json w = read_json(fs::path(want_dir) / kModelSlimDescriptionFile);
  EXPECT_EQ(d, w);
  EXPECT_EQ(read_json(out.path / "config.json"), read_json(fs::path(want_dir) / "config.json"));
  EXPECT_TRUE(fs::exists(out.path / "generation_config.json"));
  const std::vector<int32_t> prompt = {405, 336, 471, 54, 123, 52, 191};
  const std::vector<float> mine = prompt_logits(out.path.string(), prompt),
                           theirs = prompt_logits(want_dir, prompt);
  ASSERT_FALSE(theirs.empty());
  EXPECT_EQ(mine, theirs);
}

TEST(Quantize, ReproducesTheW8A8DynamicFixtureByteForByte) {
  expect_same_checkpoint("qwen3_f32", "qwen3_w8a8_dynamic", 14);  // 2 layers x 7 projections
}

// MLA's four projections and every MLP and expert projection of both decoder layers; the MTP
// layer (layer 2) stays FLOAT.
TEST(Quantize, DeepSeekV3MlaAndExpertsReproduceTheirFixture) {
  expect_same_checkpoint("deepseek_v3_f32", "deepseek_v3_w8a8_dynamic", 40);
}

// msModelSlim's w4a8 recipe: int4 experts (nibbles, scales, scale_bias per row or per 16 column
// chunks) beside W8A8_DYNAMIC attention and dense layers.
TEST(Quantize, W4A8ExpertsReproduceTheirFixture) {
  expect_same_checkpoint("qwen3_moe_f32", "qwen3_moe_w4a8_dynamic", 63, "W4A8_DYNAMIC");
}

// A bf16 checkpoint: its FLOAT tensors stay bf16, the projections become int8, and the result
// stays within 5 % of each logit row's largest value of the bf16 model's goldens.
TEST(Quantize, ABf16CheckpointQuantizesAndServesNearItsLogits) {
  TempDir out;
  auto r = quantize_checkpoint(options(fixture("qwen3_bf16"), out.path));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_LT(r->bytes_out, r->bytes_in);
  auto st = SafetensorsFile::open((out.path / "quant_model_weights.safetensors").string());
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)->tensor("model.embed_tokens.weight")->dtype, DType::BF16);
  EXPECT_EQ((*st)->tensor("model.layers.1.mlp.down_proj.weight")->dtype, DType::I8);
  const nlohmann::json golden = read_json(fs::path(fixture("qwen3_bf16")) / "golden.json");
  const auto prompt = golden.at("prompts")[0].get<std::vector<int32_t>>();
  auto ref = SafetensorsFile::open(fixture("qwen3_bf16") + "/golden.safetensors");
  ASSERT_TRUE(ref.ok());
  const Tensor want = *(*ref)->tensor("logits.0");
  const std::vector<float> got = prompt_logits(out.path.string(), prompt);
  ASSERT_EQ(got.size(), size_t(want.numel()));
  size_t row = 0;
  EXPECT_LE(test::max_row_rel_err(got.data(), want.as<float>(), want.rows(), want.cols(), &row),
            0.05)
      << "position " << row;
}

TEST(Quantize, RefusesWhatItCannotConvert) {
  TempDir out;
  auto why = [&](const std::string& model) {
    fs::remove_all(out.path);
    auto r = quantize_checkpoint(options(model, out.path));
    return r.ok() ? std::string() : r.error().message;
  };
  EXPECT_NE(why(fixture("qwen3_w8a8_dynamic")).find("already an msModelSlim"), std::string::npos);
  EXPECT_NE(why(fixture("deepseek_v3_fp8")).find("FP8"), std::string::npos);
  EXPECT_NE(why("/nonexistent").find("not a model directory"), std::string::npos);
  fs::create_directories(out.path);
  std::ofstream(out.path / "keep") << "x";
  auto r = quantize_checkpoint(options(fixture("qwen3_f32"), out.path));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not empty"), std::string::npos);
}

// Static W8A8 calibrated on the fixture's own prompts: the numpy fixture's calibration of the same
// prompts (in float64), so the same codes and, within f32 rounding of the ranges, the same
// activation scales and offsets; it serves the fixture's greedy tokens.
TEST(Quantize, StaticW8A8CalibratedOnThePromptsMatchesItsFixture) {
  TempDir out;
  QuantizeOptions o = options(fixture("qwen3_f32"), out.path);
  o.quant_type = "W8A8";
  const nlohmann::json golden = read_json(fs::path(fixture("qwen3_w8a8")) / "golden.json");
  o.calibration = golden.at("prompts").get<std::vector<std::vector<int32_t>>>();
  auto r = quantize_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->quantized, 14);
  EXPECT_EQ(r->quantized_static, 14);
  EXPECT_EQ(read_json(out.path / kModelSlimDescriptionFile),
            read_json(fs::path(fixture("qwen3_w8a8")) / kModelSlimDescriptionFile));
  auto got = SafetensorsFile::open((out.path / "quant_model_weights.safetensors").string());
  auto want = SafetensorsFile::open(fixture("qwen3_w8a8") + "/quant_model_weights.safetensors");
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ((*got)->entries().size(), (*want)->entries().size());
  int offsets_moved = 0;
  for (const SafetensorsEntry& e : (*want)->entries()) {
    SCOPED_TRACE(e.name);
    auto a = (*got)->tensor(e.name);
    auto b = (*want)->tensor(e.name);
    ASSERT_TRUE(a.ok()) << a.error().message;
    ASSERT_EQ(a->dtype, b->dtype);
    ASSERT_EQ(a->nbytes(), b->nbytes());
    if (e.name.ends_with(".weight")) {
      EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes()), 0);
    } else if (e.name.ends_with(".input_offset")) {
      const float x = a->as<float>()[0], y = b->as<float>()[0];
      EXPECT_LE(std::fabs(x - y), 1.0f);
      offsets_moved += x != y;
    } else if (a->dtype == DType::F32) {  // input_scale, deq_scale
      for (int64_t i = 0; i < a->numel(); ++i)
        EXPECT_NEAR(a->as<float>()[i], b->as<float>()[i], 1e-5 * std::fabs(b->as<float>()[i]));
    }
  }
  EXPECT_EQ(offsets_moved, 0);
  const auto prompt = golden.at("prompts")[0].get<std::vector<int32_t>>();
  const std::vector<float> mine = prompt_logits(out.path.string(), prompt),
                           theirs = prompt_logits(fixture("qwen3_w8a8"), prompt);
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_NEAR(mine[i], theirs[i], 1e-3) << i;
}

// MoE experts stay W8A8_DYNAMIC (vLLM-Ascend runs only those) beside the static attention; so
// does DeepSeek's kv_b, which MLA absorbs (its input is never quantized).
TEST(Quantize, StaticW8A8LeavesExpertsAndAbsorbedWeightsDynamic) {
  for (const auto& [model, dynamic_name] :
       {std::pair{"qwen3_moe_f32", "model.layers.1.mlp.experts.0.up_proj.weight"},
        std::pair{"deepseek_v3_f32", "model.layers.0.self_attn.kv_b_proj.weight"}}) {
    SCOPED_TRACE(model);
    TempDir out;
    QuantizeOptions o = options(fixture(model), out.path);
    o.quant_type = "W8A8";
    o.calibration = {{5, 17, 300, 41, 9, 77, 120, 3}, {60, 61, 62}};
    auto r = quantize_checkpoint(o);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_GT(r->quantized_static, 0);
    EXPECT_LT(r->quantized_static, r->quantized);
    const nlohmann::json d = read_json(out.path / kModelSlimDescriptionFile);
    EXPECT_EQ(d.at("model_quant_type"), "W8A8");
    EXPECT_EQ(d.at(dynamic_name), "W8A8_DYNAMIC");
    const std::string attn = "model.layers.1.self_attn.o_proj.";
    EXPECT_EQ(d.at(attn + "weight"), "W8A8");
    EXPECT_EQ(d.at(attn + "quant_bias"), "W8A8");
    EXPECT_FALSE(prompt_logits(out.path.string(), {5, 17, 300}).empty());
  }
}

TEST(Quantize, StaticW8A8NeedsCalibrationAndValidIds) {
  TempDir out;
  QuantizeOptions o = options(fixture("qwen3_f32"), out.path);
  o.quant_type = "W8A8";
  auto none = quantize_checkpoint(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("calibration"), std::string::npos);
  o.calibration = {{1, 2, 9999}};
  auto bad = quantize_checkpoint(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("9999"), std::string::npos) << bad.error().message;
  o.quant_type = "W4A16";
  auto type = quantize_checkpoint(o);
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.error().message.find("W4A16"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
