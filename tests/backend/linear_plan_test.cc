// The CPU backend's Linear plan table (backend/cpu/linear_plan.h): every weight dtype has a row
// over its stored rows at every ISA and compute mode, the first fitting row wins (packed copies
// where the ISA has a GEMM for them), a plan made at one ISA still runs when a test caps the ISA
// afterwards, and prepare_weight logs each weight's choice at debug level.
#include <gtest/gtest.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

const DType kAllDtypes[] = {DType::F32,  DType::F16,  DType::BF16,    DType::Q4_0, DType::Q4_1,
                            DType::Q5_0, DType::Q5_1, DType::Q8_0,    DType::Q4_K, DType::Q5_K,
                            DType::Q6_K, DType::I8,   DType::F8_E4M3, DType::MXFP4};

Isa isa_of(const std::string& name) {
  return name == "avx512"                      ? Isa::kAvx512
         : name == "avx2" || name == "avxvnni" ? Isa::kAvx2
                                               : Isa::kScalar;
}

class LinearPlanTest : public testing::Test {
 protected:
  void TearDown() override {
    set_linear_isa("auto");
    set_packed_amx(true);
    set_amx_bf16(false);
  }
};

TEST_F(LinearPlanTest, EveryDtypeHasARowOverItsStoredRowsAtEveryIsaAndMode) {
  std::vector<uint8_t> bytes(1 << 16);
  for (const std::string& name : available_isas()) {
    const Isa isa = isa_of(name);
    for (DType d : kAllDtypes)
      for (QuantCompute mode : {QuantCompute::kInt8, QuantCompute::kF32}) {
        SCOPED_TRACE(testing::Message() << name << " " << dtype_name(d) << " mode " << int(mode));
        const Tensor w{bytes.data(), d, Shape{4, 256}};
        const LinearKernel* k = choose_linear_kernel(w, isa, mode, DType::F32, false);
        ASSERT_NE(k, nullptr);
        EXPECT_EQ(k->packing, Packing::kNone);
        EXPECT_EQ(k->isa, isa);
        EXPECT_EQ(k->dtype, d);
        EXPECT_TRUE(k->dot != nullptr || k->rows_dot != nullptr || k->fp8_rows != nullptr);
        // The exact lookup finds the same row.
        EXPECT_EQ(find_linear_kernel(d, Packing::kNone, isa, mode), k);
      }
    // A dtype no kernel reads has no row.
    const Tensor ints{bytes.data(), DType::I32, Shape{4, 32}};
    EXPECT_EQ(choose_linear_kernel(ints, isa, QuantCompute::kInt8, DType::F32, true), nullptr);
  }
}

TEST_F(LinearPlanTest, ActivationFormatFollowsTheComputeMode) {
  std::vector<uint8_t> bytes(1 << 16);
  const Tensor q4k{bytes.data(), DType::Q4_K, Shape{4, 256}};
  const Tensor q4_1{bytes.data(), DType::Q4_1, Shape{4, 256}};
  for (const std::string& name : available_isas()) {
    const Isa isa = isa_of(name);
    EXPECT_EQ(choose_linear_kernel(q4k, isa, QuantCompute::kInt8, DType::F32, false)->act,
              ActFormat::kQ8_K);
    // Q4_1 takes Q8_0 codes with exact sums (the packed GEMMs' values), not llama.cpp's Q8_1.
    EXPECT_EQ(choose_linear_kernel(q4_1, isa, QuantCompute::kInt8, DType::F32, false)->act,
              ActFormat::kQ8S);
    EXPECT_EQ(choose_linear_kernel(q4k, isa, QuantCompute::kF32, DType::F32, false)->act,
              ActFormat::kF32);
  }
}

TEST_F(LinearPlanTest, PackedRowsComeFirstWhereTheirGemmRuns) {
  std::vector<uint8_t> bytes(1 << 16);
  std::vector<int8_t> wide(4 * 64, 100), narrow(4 * 64, 7);
  for (const std::string& name : available_isas()) {
    SCOPED_TRACE(name);
    const Isa isa = isa_of(name);
    auto packing = [&](const Tensor& w, QuantCompute mode, DType act = DType::F32) {
      return choose_linear_kernel(w, isa, mode, act, true)->packing;
    };
    const Tensor q8{bytes.data(), DType::Q8_0, Shape{4, 64}};
    const Tensor f16{bytes.data(), DType::F16, Shape{4, 64}};
    const Tensor i8{wide.data(), DType::I8, Shape{4, 64}};
    const Tensor i4{narrow.data(), DType::I8, Shape{4, 64}};
    const bool simd = isa != Isa::kScalar;
    EXPECT_EQ(packing(q8, QuantCompute::kInt8), simd ? Packing::kQ8Panels : Packing::kNone);
    // The panels hold int8 activations' blocks: f32 compute reads the stored rows.
    EXPECT_EQ(packing(q8, QuantCompute::kF32), Packing::kNone);
    EXPECT_EQ(packing(f16, QuantCompute::kInt8), simd ? Packing::kFloatPanels : Packing::kNone);
    // I8 panels serve the AVX2 GEMM too; codes that fit int4 take half the bytes.
    EXPECT_EQ(packing(i8, QuantCompute::kInt8), simd ? Packing::kInt8Panels : Packing::kNone);
    EXPECT_EQ(packing(i4, QuantCompute::kInt8), simd ? Packing::kInt4Panels : Packing::kNone);
    // A vector is not a matrix: no panels.
    const Tensor vec{bytes.data(), DType::Q8_0, Shape{64}};
    EXPECT_EQ(packing(vec, QuantCompute::kInt8), Packing::kNone);
  }
}

// bf16 tiles round activations to bf16 and accumulate in their own way: only a model computing
// in bf16 gets them, only with AMX, and only when asked for (set_amx_bf16).
TEST_F(LinearPlanTest, Bf16TilesOnlyForBf16ActivationsWithAmxWhenAsked) {
  std::vector<uint8_t> bytes(1 << 16);
  const Tensor bf16{bytes.data(), DType::BF16, Shape{4, 64}};
  if (!avx512_selected()) GTEST_SKIP() << "no AVX-512 here";
  EXPECT_EQ(
      choose_linear_kernel(bf16, Isa::kAvx512, QuantCompute::kInt8, DType::BF16, true)->packing,
      Packing::kFloatPanels)
      << "the tiles are off by default";
  set_amx_bf16(true);
  EXPECT_EQ(
      choose_linear_kernel(bf16, Isa::kAvx512, QuantCompute::kInt8, DType::F32, true)->packing,
      Packing::kFloatPanels);
  const Packing with_bf16 =
      choose_linear_kernel(bf16, Isa::kAvx512, QuantCompute::kInt8, DType::BF16, true)->packing;
  EXPECT_EQ(with_bf16, bf16_tiles_supported() && amx_bf16_gemm() != nullptr
                           ? Packing::kBf16Tiles
                           : Packing::kFloatPanels);
  set_packed_amx(false);
  EXPECT_EQ(
      choose_linear_kernel(bf16, Isa::kAvx512, QuantCompute::kInt8, DType::BF16, true)->packing,
      Packing::kFloatPanels);
}

// A weight planned at the best ISA, then run with the ISA capped: the same bits as a weight
// planned at the capped ISA (the packed copy is read only where a row at that ISA reads it).
TEST_F(LinearPlanTest, PlanMadeAtOneIsaRunsAtAnother) {
  const int64_t n = 37, k = 256, m = 5;
  ThreadPool pool(2);
  const std::vector<float> src = randn(n * k, 11), x = randn(m * k, 12);
  for (DType d : {DType::Q8_0, DType::Q4_1, DType::F16}) {
    std::vector<uint8_t> bytes(dtype_bytes(d, n * k));
    for (int64_t r = 0; r < n; ++r)
      quantize_row(d, src.data() + r * k, bytes.data() + r * dtype_bytes(d, k), k);
    const Tensor t{bytes.data(), d, Shape{n, k}};
    set_linear_isa("auto");
    const std::unique_ptr<CpuLinearPlan> best =
        make_linear_plan(t, QuantCompute::kInt8, DType::F32);
    ASSERT_NE(best, nullptr);
    for (const std::string& isa : available_isas()) {
      SCOPED_TRACE(testing::Message() << dtype_name(d) << " at " << isa);
      set_linear_isa(isa.c_str());
      const std::unique_ptr<CpuLinearPlan> here =
          make_linear_plan(t, QuantCompute::kInt8, DType::F32);
      std::vector<float> a(size_t(m * n), -1.0f), b(size_t(m * n), -2.0f);
      LinearWeight planned_best{t}, planned_here{t};
      planned_best.plan = best.get();
      planned_here.plan = here.get();
      linear(planned_best, x.data(), m, a.data(), pool);
      linear(planned_here, x.data(), m, b.data(), pool);
      EXPECT_EQ(a, b);
    }
  }
}

TEST_F(LinearPlanTest, PrepareWeightLogsEachChoiceAtDebugLevel) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("plan-test", sink);
  logger->set_level(spdlog::level::debug);
  spdlog::set_default_logger(logger);
  std::vector<uint8_t> bytes(dtype_bytes(DType::Q4_K, 8 * 256));
  LinearWeight w{Tensor{bytes.data(), DType::Q4_K, Shape{8, 256}}};
  {
    const std::unique_ptr<Backend> be = make_cpu_backend(1);
    be->prepare_weight(w, DType::F32, "model.layers.0.mlp.down_proj");
    ASSERT_NE(w.plan, nullptr);
  }
  spdlog::set_default_logger(before);
  std::string all;
  for (const std::string& line : sink->last_formatted()) all += line;
  // The table at start-up, then the weight's line with its kernel.
  EXPECT_NE(all.find("linear kernels at"), std::string::npos) << all;
  EXPECT_NE(all.find("model.layers.0.mlp.down_proj q4_k [8, 256]"), std::string::npos) << all;
  EXPECT_NE(all.find("quant·q8 dot"), std::string::npos) << all;
  EXPECT_NE(all.find("q8_k activations"), std::string::npos) << all;
}

}  // namespace
}  // namespace kestrel::cpu
