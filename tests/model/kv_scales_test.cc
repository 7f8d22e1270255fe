// KV cache scales read from checkpoints (model/kv_scales.h): the fixtures' per-head FP8 scales,
// C8 per-channel scales and offsets and MXFP8's E8M0 V scales land on the right channels of
// each tensor-parallel rank's heads; absent FP8 scales calibrate from the first batch only;
// bad scales and missing C8 tensors are refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "formats/safetensors.h"
#include "model/kv_scales.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string fixture(const std::string& name) {
  return test::fixtures_dir() + "/models/" + name;
}

std::unique_ptr<WeightSource> source(const std::string& name) {
  auto ck = SafetensorsCheckpoint::open_dir(fixture(name));
  EXPECT_TRUE(ck.ok()) << ck.error().message;
  return make_safetensors_source(std::move(*ck), fixture(name));
}

std::vector<float> tensor(WeightSource& src, const std::string& name, const Shape& shape) {
  auto t = src.get(name, shape);
  EXPECT_TRUE(t.ok()) << t.error().message;
  std::vector<float> out(size_t(t->numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t->dtype == DType::U8 ? float(static_cast<const uint8_t*>(t->data)[i])
                                   : static_cast<const float*>(t->data)[i];
  return out;
}

// The qwen3 fixtures: 2 KV heads of 32 dimensions.
constexpr int64_t kHeads = 2, kDim = 32;
const std::string kAttn = "model.layers.1.self_attn.";

TEST(KvScales, Fp8PerHeadScalesCoverTheirHeadsChannelsOnEachRank) {
  auto src = source("qwen3_ct_w8a8_fp8kv");
  const std::vector<float> k = tensor(*src, kAttn + "k_scale", Shape{kHeads});
  const std::vector<float> v = tensor(*src, kAttn + "v_scale", Shape{kHeads});
  ASSERT_NE(k[0], k[1]);
  for (const IndexRange heads : {IndexRange{0, 2}, IndexRange{1, 2}}) {
    auto s = KvLayerScales::load(*src, {DType::F8_E4M3}, kAttn, heads, kHeads, kDim);
    ASSERT_TRUE(s.ok()) << s.error().message;
    KVLayer layer;
    s->apply(layer);
    ASSERT_NE(layer.k_scale, nullptr);
    EXPECT_EQ(layer.k_offset, nullptr);
    for (int64_t h = heads.begin; h < heads.end; ++h)
      for (int64_t d = 0; d < kDim; ++d) {
        const int64_t at = (h - heads.begin) * kDim + d;
        EXPECT_EQ(layer.k_scale[at], k[size_t(h)]) << h << " " << d;
        EXPECT_EQ(layer.v_scale[at], v[size_t(h)]) << h << " " << d;
      }
    EXPECT_FALSE(s->pending());
  }
}

TEST(KvScales, C8PerChannelScalesAndOffsetsFollowTheRanksHeads) {
  auto src = source("qwen3_w8a8c8");
  const Shape all{kHeads * kDim};
  const std::vector<float> ks = tensor(*src, kAttn + "k_proj.kv_cache_scale", all),
                           ko = tensor(*src, kAttn + "k_proj.kv_cache_offset", all),
                           vs = tensor(*src, kAttn + "v_proj.kv_cache_scale", all),
                           vo = tensor(*src, kAttn + "v_proj.kv_cache_offset", all);
  auto s = KvLayerScales::load(*src, {DType::I8}, kAttn, IndexRange{1, 2}, kHeads, kDim);
  ASSERT_TRUE(s.ok()) << s.error().message;
  KVLayer layer;
  s->apply(layer);
  for (int64_t d = 0; d < kDim; ++d) {
    EXPECT_EQ(layer.k_scale[d], ks[size_t(kDim + d)]);
    EXPECT_EQ(layer.k_offset[d], ko[size_t(kDim + d)]);
    EXPECT_EQ(layer.v_scale[d], vs[size_t(kDim + d)]);
    EXPECT_EQ(layer.v_offset[d], vo[size_t(kDim + d)]);
  }
  // The float fixture has no C8 tensors: an int8 cache cannot be served from it.
  auto none = KvLayerScales::load(*source("qwen3_w8a8_dynamic"), {DType::I8}, kAttn,
                                  IndexRange{0, 2}, kHeads, kDim);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find(kAttn + "k_proj.kv_cache_scale"), std::string::npos);
}

TEST(KvScales, Mxfp8VScalesArePowersOfTwoAndAStoredZeroIsOne) {
  auto src = source("qwen3_w8a8_mxfp8kv");
  const std::string attn0 = "model.layers.0.self_attn.";
  const std::vector<float> e =
      tensor(*src, attn0 + "v_proj.kv_cache_scale", Shape{kHeads * kDim, 1});
  ASSERT_EQ(e[0], 0.0f);  // the fixture stores one 0
  KvCacheQuant q{DType::MXFP8};
  q.static_v_scales = true;
  auto s = KvLayerScales::load(*src, q, attn0, IndexRange{0, 2}, kHeads, kDim);
  ASSERT_TRUE(s.ok()) << s.error().message;
  KVLayer layer;
  s->apply(layer);
  EXPECT_EQ(layer.k_scale, nullptr);  // K's scales are in its rows
  EXPECT_EQ(layer.v_scale[0], 1.0f);
  for (size_t i = 1; i < e.size(); ++i)
    EXPECT_EQ(layer.v_scale[i], std::ldexp(1.0f, int(e[i]) - 127));
  // Without the checkpoint's marker, V's scale is 1.
  auto plain = KvLayerScales::load(*src, {DType::MXFP8}, attn0, IndexRange{0, 2}, kHeads, kDim);
  ASSERT_TRUE(plain.ok());
  KVLayer unscaled;
  plain->apply(unscaled);
  EXPECT_EQ(unscaled.v_scale, nullptr);
}

// A source of a few small f32 tensors.
class MapSource final : public WeightSource {
 public:
  explicit MapSource(std::map<std::string, std::vector<float>> t) : t_(std::move(t)) {}
  bool has(const std::string& n) const override { return t_.count(n) != 0; }
  Expected<Tensor> get(const std::string& n, const Shape& expected) override {
    auto& v = t_.at(n);
    // Stored as [n]: other shapes of the same count are a mismatch, as in a checkpoint.
    if (!(expected == Shape{int64_t(v.size())})) return make_error("{}: shape", n);
    Tensor t;
    t.data = v.data();
    t.dtype = DType::F32;
    t.shape = expected;
    return t;
  }
  std::string describe() const override { return "map"; }

 private:
  std::map<std::string, std::vector<float>> t_;
};

TEST(KvScales, AbsentFp8ScalesCalibrateOnceFromTheFirstBatch) {
  const std::unique_ptr<Backend> be = make_cpu_backend(1);
  MapSource src({{"a.v_scale", {0.5f}}});  // V given per tensor, K absent
  KvCacheQuant q{DType::F8_E4M3};
  q.calculate_scales = true;
  auto s = KvLayerScales::load(src, q, "a.", IndexRange{0, 1}, 1, 4);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->pending());
  s->calibrate(*be, nullptr, nullptr, 0, 4);  // an empty batch sets nothing
  EXPECT_TRUE(s->pending());
  const float k[8] = {1, -3, 2, 0.5f, 0, 8, -1, 2}, v[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  s->calibrate(*be, k, v, 2, 4);
  EXPECT_FALSE(s->pending());
  KVLayer layer;
  s->apply(layer);
  // max|k| = 8 maps to 200 of E4M3's 448 (vLLM's K_SCALE_CONSTANT); V keeps the checkpoint's.
  for (int d = 0; d < 4; ++d) {
    EXPECT_FLOAT_EQ(layer.k_scale[d], 8.0f / 200.0f);
    EXPECT_EQ(layer.v_scale[d], 0.5f);
  }
  const float big[8] = {100, 100, 100, 100, 100, 100, 100, 100};
  s->calibrate(*be, big, big, 2, 4);  // later batches change nothing
  s->apply(layer);
  EXPECT_FLOAT_EQ(layer.k_scale[0], 8.0f / 200.0f);
  // E5M2 scales map the same share of its larger range.
  KvCacheQuant q5{DType::F8_E5M2};
  q5.calculate_scales = true;
  MapSource empty({});
  auto s5 = KvLayerScales::load(empty, q5, "a.", IndexRange{0, 1}, 1, 4);
  ASSERT_TRUE(s5.ok());
  s5->calibrate(*be, k, v, 2, 4);
  s5->apply(layer);
  EXPECT_FLOAT_EQ(layer.k_scale[0], 8.0f / (57344.0f * 200.0f / 448.0f));
  EXPECT_FLOAT_EQ(layer.v_scale[0], 9.0f / (57344.0f * 100.0f / 448.0f));
}

TEST(KvScales, BadScalesAreRefusedNamingTheTensor) {
  MapSource src({{"a.k_scale", {-1.0f}}, {"a.v_scale", {1.0f}}});
  auto s = KvLayerScales::load(src, {DType::F8_E4M3}, "a.", IndexRange{0, 1}, 1, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("a.k_scale"), std::string::npos) << s.error().message;
  MapSource wrong({{"a.k_scale", {1.0f, 2.0f, 3.0f}}, {"a.v_scale", {1.0f}}});
  auto w = KvLayerScales::load(wrong, {DType::F8_E4M3}, "a.", IndexRange{0, 2}, 2, 4);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("a.k_scale"), std::string::npos) << w.error().message;
  // The older output_scale names and one kv_scale for both are read too.
  MapSource old({{"a.kv_scale", {2.0f}}});
  auto o = KvLayerScales::load(old, {DType::F8_E4M3}, "a.", IndexRange{0, 1}, 1, 4);
  ASSERT_TRUE(o.ok()) << o.error().message;
  KVLayer layer;
  o->apply(layer);
  EXPECT_EQ(layer.k_scale[3], 2.0f);
  EXPECT_EQ(layer.v_scale[3], 2.0f);
}

}  // namespace
}  // namespace kestrel
