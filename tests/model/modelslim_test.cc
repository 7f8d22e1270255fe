// msModelSlim checkpoints (model/modelslim.h): the description file's types and global keys, the
// layer lookup (MTP's shared_head. dropped), what is refused and how the message names it, and
// the loader's --quantization ascend rules; the W8A8_DYNAMIC, W8A8 and MoE fixtures
// (tools/make_modelslim_fixtures.py) stay within a stated distance of their float models.
#include "model/modelslim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "logit_error.h"
#include "model/loader.h"
#include "prompt_logits.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// A directory with `description` as its quant_model_description.json, removed at the end.
struct DescriptionDir {
  fs::path dir;
  explicit DescriptionDir(const nlohmann::json& description) {
    dir = fs::temp_directory_path() /
          ("modelslim_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(dir);
    std::ofstream(dir / kModelSlimDescriptionFile) << description.dump();
  }
  ~DescriptionDir() { fs::remove_all(dir); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

TEST(ModelSlim, ReadsTypesAndGlobalKeys) {
  DescriptionDir d({{"version", "1.0.0"},
                    {"model_quant_type", "W8A8_DYNAMIC"},
                    {"group_size", 0},
                    {"metadata", {{"quarot", {{"max_tp_size", 8}}}}},
                    {"model.layers.0.self_attn.q_proj.weight", "W8A8_DYNAMIC"},
                    {"model.layers.0.self_attn.q_proj.weight_scale", "W8A8_DYNAMIC"},
                    {"model.layers.3.shared_head.head.weight", "FLOAT"},
                    {"model.embed_tokens.weight", "FLOAT"}});
  auto read = read_modelslim_description(d.dir.string());
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_TRUE(read->has_value());
  const ModelSlimDescription& m = **read;
  EXPECT_EQ(m.version, "1.0.0");
  EXPECT_EQ(m.model_quant_type, "W8A8_DYNAMIC");
  EXPECT_TRUE(m.quarot);  // offline: nothing to apply
  EXPECT_EQ(m.types.size(), 4u);
  EXPECT_EQ(m.layer_type("model.layers.0.self_attn.q_proj"), "W8A8_DYNAMIC");
  EXPECT_EQ(m.layer_type("model.layers.3.shared_head.head"), "FLOAT");
  EXPECT_EQ(m.layer_type("model.layers.0.mlp.gate_proj"), "FLOAT");  // not listed
  ModelSlimDescription packed;
  packed.types["model.layers.2.mlp.up_proj.weight_packed"] = "W8A8_DYNAMIC";
  EXPECT_EQ(packed.layer_type("model.layers.2.mlp.up_proj"), "W8A8_DYNAMIC");
  EXPECT_TRUE(check_modelslim(m).ok());
  // A directory without the file has no description.
  auto none = read_modelslim_description(fs::temp_directory_path().string());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(ModelSlim, RefusesWhatItDoesNotRunNamingTheTypeAndTensor) {
  auto refusal = [](const nlohmann::json& description) -> std::string {
    DescriptionDir d(description);
    auto read = read_modelslim_description(d.dir.string());
    if (!read.ok()) return read.error().message;
    const Status st = check_modelslim(**read);
    return st.ok() ? "" : st.message();
  };
  const std::string w4 = refusal({{"model.layers.1.mlp.experts.0.up_proj.weight", "W4A16"}});
  EXPECT_NE(w4.find("W4A16"), std::string::npos) << w4;
  EXPECT_NE(w4.find("model.layers.1.mlp.experts.0.up_proj.weight"), std::string::npos) << w4;
  EXPECT_NE(refusal({{"a.weight", "W8A8_MXFP8"}}).find("W8A8_MXFP8"), std::string::npos);
  // C8 and the MXFP8 marker are KV caches Kestrel keeps; other kv_cache_types are refused.
  EXPECT_EQ(refusal({{"kv_cache_type", "C8"},
                     {"a.weight", "W8A8"},
                     {"model.layers.0.self_attn.k_proj.kv_cache_scale", "C8"}}),
            "");
  EXPECT_EQ(refusal({{"kv_cache_type", "K_DYNAMIC_V_STATIC_MXFP8_PER_CHANNEL"}}), "");
  const std::string c4 = refusal({{"kv_cache_type", "C4"}, {"a.weight", "W8A8"}});
  EXPECT_NE(c4.find("kv_cache_type C4"), std::string::npos) << c4;
  // A C8-typed tensor that is not a KV scale is a weight type Kestrel does not run.
  EXPECT_NE(refusal({{"kv_cache_type", "C8"}, {"a.weight", "C8"}}).find("a.weight"),
            std::string::npos);
  EXPECT_NE(refusal({{"group_size", 128}, {"a.weight", "W8A8_DYNAMIC"}}).find("group_size 128"),
            std::string::npos);
  const std::string online =
      refusal({{"metadata", {{"quarot", {{"heads_rotation", {{"layers", {0, 1}}}}}}}}});
  EXPECT_NE(online.find("online rotations"), std::string::npos) << online;
  EXPECT_NE(refusal({{"a.weight", 3}}).find("not a string"), std::string::npos);
  // The shards of a fused module (qkv, gate_up, DeepSeek's q_a + kv_a, a layer's experts) take
  // one quantization; separate modules may differ.
  const std::string qkv = refusal({{"model.layers.0.self_attn.q_proj.weight", "W8A8"},
                                   {"model.layers.0.self_attn.k_proj.weight", "W8A8"},
                                   {"model.layers.0.self_attn.v_proj.weight", "FLOAT"},
                                   {"model.layers.0.self_attn.o_proj.weight", "W8A8_DYNAMIC"}});
  EXPECT_NE(qkv.find("model.layers.0.self_attn.qkv_proj"), std::string::npos) << qkv;
  EXPECT_NE(qkv.find("v_proj.weight is FLOAT"), std::string::npos) << qkv;
  const std::string experts =
      refusal({{"model.layers.2.mlp.experts.0.down_proj.weight", "W4A8_DYNAMIC"},
               {"model.layers.2.mlp.experts.7.up_proj.weight", "W8A8_DYNAMIC"},
               {"model.layers.2.mlp.shared_experts.up_proj.weight", "W8A8_DYNAMIC"},
               {"model.layers.2.mlp.shared_experts.gate_proj.weight", "W8A8_DYNAMIC"}});
  EXPECT_NE(experts.find("model.layers.2.mlp.experts "), std::string::npos) << experts;
  EXPECT_NE(refusal({{"model.layers.0.self_attn.q_a_proj.weight", "W8A8"},
                     {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "W8A8_DYNAMIC"}})
                .find("fused_qkv_a_proj"),
            std::string::npos);
  EXPECT_EQ(refusal({{"model.layers.0.mlp.gate_proj.weight", "W8A8_DYNAMIC"},
                     {"model.layers.0.mlp.up_proj.weight", "W8A8_DYNAMIC"},
                     {"model.layers.0.mlp.down_proj.weight", "W8A8"},
                     {"model.layers.1.mlp.gate_proj.weight", "FLOAT"},
                     {"model.layers.1.mlp.up_proj.weight", "FLOAT"}}),
            "");
}

// Two's-complement nibbles along the output rows: row 2r low, 2r + 1 high; and the scale_bias
// check that confirms it (a wrong nibble order or sign gives other row sums).
TEST(ModelSlim, W4A8RowsUnpackAndTheirScaleBiasConfirmsIt) {
  const int8_t packed[4] = {int8_t(0x8F), int8_t(0x70), int8_t(0x21), int8_t(0xE9)};  // [2, 2]
  int8_t rows[8];
  unpack_w4a8_rows(packed, 4, 2, rows);
  const int8_t want[8] = {-1, 0, -8, 7, 1, -7, 2, -2};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rows[i], want[i]) << i;
  const float scale[4] = {0.5f, 0.25f, 2.0f, 1.0f};
  // 8 · scale · Σ w per row: row 0 sums to -1, row 1 to -1, row 2 to -6, row 3 to 0.
  const float bias[4] = {-4.0f, -2.0f, -96.0f, 0.0f};
  EXPECT_TRUE(check_w4a8_scale_bias(rows, scale, bias, 4, 2, 1).ok());
  // The same terms split over two chunks per row.
  const float chunks[8] = {-4.0f, 0.0f, -16.0f, 14.0f, 16.0f, -112.0f, 16.0f, -16.0f};
  EXPECT_TRUE(check_w4a8_scale_bias(rows, scale, chunks, 4, 2, 2).ok());
  // Nibbles taken the other way round: the rows of each pair swap, and row 2's term (its sum
  // now 0) no longer fits.
  int8_t swapped[8] = {-8, 7, -1, 0, 2, -2, 1, -7};
  const Status st = check_w4a8_scale_bias(swapped, scale, bias, 4, 2, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("row 2"), std::string::npos) << st.message();
}

TEST(ModelSlim, TheAscendFlagNeedsTheDescriptionAndTheDescriptionRefusesOtherFlags) {
  LoadOptions o;
  o.threads = 1;
  o.model = fixture("qwen3_f32");
  o.quantization = "ascend";
  auto plain = load_model(o);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.error().message.find("no quant_model_description.json"), std::string::npos)
      << plain.error().message;
  o.model = fixture("qwen3_w8a8_dynamic");
  o.quantization = "fp8";
  auto other = load_model(o);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("--quantization ascend"), std::string::npos)
      << other.error().message;
  for (const char* flag : {"ascend", ""}) {  // implied without the flag
    o.quantization = flag;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_NE(m->get()->config.modelslim, nullptr);
  }
}

// Kestrel's logits on each quantized fixture against its float model's goldens: quantization
// costs at most 5 % of a row's largest logit on these (the generator's float64 evaluations
// differ by 1.6-3.3 %, 4.0 % with int4 experts). Greedy tokens equal the quantized goldens
// (model_golden_test.cc); their agreement with the float model's is in golden.json.
TEST(ModelSlim, QuantizedFixturesStayNearTheirFloatModels) {
  const std::pair<const char*, double> fixtures[] = {{"qwen3_w8a8_dynamic", 0.05},
                                                     {"qwen3_w8a8", 0.05},
                                                     {"qwen3_moe_w8a8_dynamic", 0.05},
                                                     {"qwen3_moe_w4a8_dynamic", 0.1}};
  for (const auto& [name, tol] : fixtures) {
    SCOPED_TRACE(name);
    std::ifstream in(fixture(name) + "/golden.json");
    const nlohmann::json g = nlohmann::json::parse(in);
    const std::string source = fixture(g.at("source").get<std::string>());
    auto floats = SafetensorsFile::open(source + "/golden.safetensors");
    ASSERT_TRUE(floats.ok());
    const auto prompts = g.at("prompts").get<std::vector<std::vector<int32_t>>>();
    for (size_t p = 0; p < prompts.size(); ++p) {
      const std::vector<int32_t>& prompt = prompts[p];
      const std::vector<float> logits = prompt_logits(fixture(name), prompt);
      ASSERT_FALSE(logits.empty());
      const int64_t V = int64_t(logits.size() / prompt.size());
      auto want = (*floats)->tensor("logits." + std::to_string(p));
      ASSERT_TRUE(want.ok());
      size_t row = 0;
      EXPECT_LE(
          test::max_row_rel_err(logits.data(), want->as<float>(), int64_t(prompt.size()), V, &row),
          tol)
          << "prompt " << p << " position " << row;
    }
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

double worst_row_error(const std::vector<float>& a, const float* b, int64_t vocab) {
  return test::max_row_rel_err(a.data(), b, int64_t(a.size()) / vocab, vocab);
}

// The checkpoint msModelSlim's own writer made (tools/make_msmodelslim_fixture.py): W8A8_MIX
// layers with bf16 side tensors, float biases on q/k/v and gate/up, norm biases, FLOAT rollbacks.
// Its per-token goldens are checked with every fixture (model_golden_test.cc); a PD decode
// instance runs the static scheme (quant_bias holding the bias), as vLLM-Ascend's decode nodes
// do, and gives the static goldens, which are another computation.
TEST(ModelSlim, TheWritersW8A8MixRunsStaticOnAPdDecodeInstance) {
  const std::string dir = fixture("qwen3_msmodelslim_w8a8");
  std::ifstream in(dir + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  auto dynamic = SafetensorsFile::open(dir + "/golden.safetensors");
  auto statics = SafetensorsFile::open(dir + "/golden_static.safetensors");
  ASSERT_TRUE(dynamic.ok() && statics.ok());
  LoadOptions decode;
  decode.dtype = "float32";
  decode.pd_decode = true;
  LoadOptions other;
  other.dtype = "float32";
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    SCOPED_TRACE(p);
    const auto prompt = golden["prompts"][p].get<std::vector<int32_t>>();
    const Tensor want = *(*statics)->tensor("logits." + std::to_string(p));
    const Tensor per_token = *(*dynamic)->tensor("logits." + std::to_string(p));
    const int64_t vocab = want.cols();
    const std::vector<float> got = prompt_logits(dir, prompt, decode);
    ASSERT_EQ(got.size(), size_t(want.numel()));
    EXPECT_LE(worst_row_error(got, want.as<float>(), vocab), 1e-2);
    // The two schemes differ by more than that, so the check tells them apart.
    EXPECT_GT(worst_row_error(got, per_token.as<float>(), vocab), 1e-2);
    EXPECT_LE(worst_row_error(prompt_logits(dir, prompt, other), per_token.as<float>(), vocab),
              1e-2);
  }
}

}  // namespace
}  // namespace kestrel
