// Kestrel's dequantizer against gguf-py: every tensor T of quant_types.gguf that has a "T.expected"
// twin (written by tools/make_gguf_fixture.py as gguf.quants.dequantize of the same bytes) must
// dequantize to exactly those floats. gguf-py computes in float32 in the order of the format
// definition; every product of an fp16 scale and small integers is exact in float32 except Q6_K's
// (d * scale) * q, which both sides evaluate in that order, so a correct dequantizer agrees bit for
// bit and no tolerance is needed.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "tensor/quant_formats.h"
#include "test_paths.h"

namespace kestrel {
namespace {

TEST(GgufDequant, MatchesGgufPyBitForBit) {
  auto g = GgufFile::open(test::fixtures_dir() + "/gguf/quant_types.gguf");
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::set<DType> covered;
  for (const GgufTensorInfo& info : (*g)->tensors()) {
    const std::string expected_name = info.name + ".expected";
    if (!(*g)->find_tensor(expected_name)) continue;
    SCOPED_TRACE(info.name);
    auto t = (*g)->tensor(info.name);
    auto e = (*g)->tensor(expected_name);
    ASSERT_TRUE(t.ok() && e.ok());
    ASSERT_EQ(e->dtype, DType::F32);
    ASSERT_EQ(t->shape, e->shape);
    std::vector<float> row(size_t(t->cols()));
    size_t nonzero = 0;
    for (int64_t r = 0; r < t->rows(); ++r) {
      dequantize_row(t->dtype, t->row(r), row.data(), t->cols());
      const float* want = reinterpret_cast<const float*>(e->row(r));
      for (int64_t c = 0; c < t->cols(); ++c) {
        uint32_t got_bits, want_bits;
        std::memcpy(&got_bits, &row[c], 4);
        std::memcpy(&want_bits, &want[c], 4);
        ASSERT_EQ(got_bits, want_bits)
            << "row " << r << " col " << c << ": got " << row[c] << ", gguf-py " << want[c];
        nonzero += want[c] != 0.0f;
      }
    }
    EXPECT_GT(nonzero, size_t(t->numel() / 2));  // the reference data is not degenerate
    covered.insert(t->dtype);
  }
  const std::set<DType> all = {DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                               DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  EXPECT_EQ(covered, all);
}

}  // namespace
}  // namespace kestrel
