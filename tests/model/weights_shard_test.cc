// load_linear's tensor-parallel shards: rows of any weight as a view, and FP8 block weights
// with their scale rows, which must start on a scale block.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "model/weights.h"

namespace kestrel {
namespace {

// Tensors by name, held in memory.
class MapSource final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  bool has(const std::string& name) const override { return tensors.count(name) != 0; }
  Expected<Tensor> get(const std::string& name, const Shape& expected) override {
    const auto it = tensors.find(name);
    if (it == tensors.end()) return make_error("no {}", name);
    if (!(it->second.shape == expected)) return make_error("{}: shape", name);
    return it->second;
  }
  std::string describe() const override { return "memory"; }
};

TEST(WeightsShard, Fp8RowsKeepTheirScaleBlocks) {
  constexpr int64_t kRows = 300, kCols = 200;  // 3 x 2 scale blocks, the last ones partial
  std::mt19937 rng(5);
  std::vector<uint8_t> codes(size_t(kRows * kCols));
  for (uint8_t& c : codes) c = uint8_t(rng() % 0x7e);  // finite E4M3 codes of either sign
  std::vector<float> scales = {0.5f, 2.0f, 0.25f, 4.0f, 1.5f, 3.0f};
  MapSource src;
  src.tensors["w.weight"] = Tensor{codes.data(), DType::F8_E4M3, Shape{kRows, kCols}};
  src.tensors["w.weight_scale_inv"] = Tensor{scales.data(), DType::F32, Shape{3, 2}};
  ModelConfig cfg;
  cfg.fp8.enabled = true;
  WeightStore store;
  auto whole = load_linear(src, "w", kRows, kCols, cfg, store);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  const std::vector<float> all = dequantize_matrix(*whole);
  for (const IndexRange shard : {IndexRange{128, 256}, IndexRange{256, 300}, IndexRange{0, 128}}) {
    auto part = load_linear(src, "w", kRows, kCols, cfg, store, shard);
    ASSERT_TRUE(part.ok()) << part.error().message;
    EXPECT_EQ(part->rows(), shard.size());
    const std::vector<float> got = dequantize_matrix(*part);
    const std::vector<float> want(all.begin() + shard.begin * kCols,
                                  all.begin() + shard.end * kCols);
    EXPECT_EQ(got, want) << "rows [" << shard.begin << ", " << shard.end << ")";
  }
  auto cut = load_linear(src, "w", kRows, kCols, cfg, store, IndexRange{64, 192});
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find("do not fall on the 128-row FP8 scale blocks"),
            std::string::npos)
      << cut.error().message;
  auto past = load_linear(src, "w", kRows, kCols, cfg, store, IndexRange{256, 320});
  ASSERT_FALSE(past.ok());
}

TEST(WeightsShard, RowsOfAFloatWeightAreAView) {
  std::vector<float> w(6 * 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i);
  MapSource src;
  src.tensors["w.weight"] = Tensor{w.data(), DType::F32, Shape{6, 4}};
  WeightStore store;
  auto part = load_linear(src, "w", 6, 4, ModelConfig{}, store, IndexRange{2, 5});
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->w.data, w.data() + 8);
  EXPECT_EQ(part->rows(), 3);
}

}  // namespace
}  // namespace kestrel
