// Backend conformance: every op of kestrel::Backend (backend/backend.h) on the CPU backend, on
// every ISA this CPU runs (scalar, AVX2, AVX-512), against float64 references written here, and
// bit-identical between a 1-thread and a 2-thread backend. Sizes mix multiples of the vector
// widths with odd ones. Attention ops: backend_conformance_attention_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_conformance.h"
#include "backend/cpu/linear_plan.h"
#include "tensor/quant_formats.h"

namespace kestrel::conformance {
namespace {

class BackendConformance : public ConformanceTest {};

// An ISA is left out only when the CPU lacks it: every one it reports must be selectable.
TEST_F(BackendConformance, CoversEveryIsaTheCpuRuns) {
  const std::vector<std::string> isas = cpu::available_isas();
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  auto has = [&](const char* isa) {
    return std::find(isas.begin(), isas.end(), isa) != isas.end();
  };
  EXPECT_TRUE(has("scalar"));
  EXPECT_EQ(has("avx2"), avx2);
  EXPECT_EQ(has("avx512"), avx512);
  std::string ran;
  for (const std::string& isa : isas) ran += " " + isa;
  std::printf("ISAs under test:%s\n", ran.c_str());
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- Weights, decoded by the GGUF format definitions (ggml's dequantize_row_*) ----

double f16_at(const uint8_t* p) {
  return f16_to_f32(uint16_t(p[0] | (p[1] << 8)));
}

// One row of k values; for Q4_1 also each block's min m (w = d·q + m).
void decode_row(DType t, const uint8_t* src, int64_t k, double* out, double* mins) {
  for (int64_t b = 0; b < k / 32; ++b) {
    if (t == DType::Q8_0) {
      const uint8_t* blk = src + 34 * b;
      for (int i = 0; i < 32; ++i) out[b * 32 + i] = f16_at(blk) * int8_t(blk[2 + i]);
    } else if (t == DType::Q4_0 || t == DType::Q4_1) {
      const bool q41 = t == DType::Q4_1;
      const uint8_t* blk = src + (q41 ? 20 : 18) * b;
      const uint8_t* qs = blk + (q41 ? 4 : 2);
      const double d = f16_at(blk), m = q41 ? f16_at(blk + 2) : -8 * d;
      if (q41) mins[b] = m;
      for (int i = 0; i < 16; ++i) {
        out[b * 32 + i] = d * (qs[i] & 15) + m;
        out[b * 32 + i + 16] = d * (qs[i] >> 4) + m;
      }
    }
  }
  for (int64_t i = 0; i < k; ++i) {
    if (t == DType::F32) out[i] = reinterpret_cast<const float*>(src)[i];
    if (t == DType::F16) out[i] = f16_to_f32(uint16_t(src[2 * i] | (src[2 * i + 1] << 8)));
    if (t == DType::BF16) out[i] = bf16_to_f32(uint16_t(src[2 * i] | (src[2 * i + 1] << 8)));
  }
}

struct Weights {
  DType type;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<double> deq, mins;  // [n, k], [n, k / 32]
  Tensor tensor() const {
    Tensor t;
    t.data = bytes.data();
    t.dtype = type;
    t.shape = Shape{n, k};
    return t;
  }
};

// The packing of the plan prepare_weight chose for w on the CPU backend.
cpu::Packing packing_of(const LinearWeight& w) {
  const auto* plan = dynamic_cast<const cpu::CpuLinearPlan*>(w.plan);
  return plan != nullptr ? plan->kernel().packing : cpu::Packing::kNone;
}

Weights make_weights(DType t, int64_t n, int64_t k, std::mt19937& rng) {
  Weights w{t,
            n,
            k,
            std::vector<uint8_t>(dtype_bytes(t, n * k)),
            std::vector<double>(n * k),
            std::vector<double>(n * k / 32 + 1)};
  const std::vector<float> src = randn(size_t(n * k), rng);
  const size_t rb = dtype_bytes(t, k);
  for (int64_t j = 0; j < n; ++j) {
    quantize_row(t, src.data() + j * k, w.bytes.data() + j * rb, k);
    decode_row(t, w.bytes.data() + j * rb, k, w.deq.data() + j * k, w.mins.data() + j * (k / 32));
  }
  return w;
}

// y = x·Wᵀ in float64 from the decoded weights and the f32 activations, with the bound the
// kernel must meet: f32 summation in any order, (K + 2)·u·Σ|w·x|; with int8 activations
// (QuantCompute::kInt8) also the activation quantization: per 32-block b with largest |x| a_b,
// each value moves by at most δ_b = a_b·(0.5/127 + 2⁻¹¹) (half a code step and the f16 rounding
// of the scale), costing δ_b·Σ_b|w|; Q4_1's min term adds |m_b|·(64·δ_b + a_b/32) (the block sum
// of the Q8_1 activations, itself stored in f16).
struct Expected {
  std::vector<double> value, bound;
};

Expected linear_reference(const Weights& w, const float* x, int64_t m, bool int8) {
  Expected e;
  const int64_t k = w.k;
  const bool quant = dtype_info(w.type).quantized;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < w.n; ++j) {
      const double* wr = w.deq.data() + j * k;
      const float* xr = x + r * k;
      double sum = 0, mag = 0, quant_err = 0;
      for (int64_t i = 0; i < k; ++i) {
        sum += wr[i] * xr[i];
        mag += std::fabs(wr[i] * xr[i]);
      }
      for (int64_t b = 0; int8 && quant && b < k / 32; ++b) {
        double amax = 0, absw = 0;
        for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
          amax = std::max(amax, std::fabs(double(xr[i])));
          absw += std::fabs(wr[i]);
        }
        const double delta = amax * (0.5 / 127 + 1.0 / 2048);
        quant_err += delta * absw;
        if (w.type == DType::Q4_1)
          quant_err += std::fabs(w.mins[j * (k / 32) + b]) * (64 * delta + amax / 32);
      }
      e.value.push_back(sum);
      e.bound.push_back(double(k + 2) * kU * mag + quant_err);
    }
  }
  return e;
}

void expect_within(const std::vector<float>& got, const Expected& e, const std::string& what) {
  cpu::Mismatches bad;
  bad.check(got, e.value, e.bound, what.c_str());
  EXPECT_EQ(bad.count, 0) << bad.first;
}

struct LinearShape {
  int64_t m, n, k;
};

// The ISA test: both backends, against the reference, and bitwise equal to each other.
TEST_F(BackendConformance, LinearFloatWeights) {
  std::mt19937 rng(1);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const LinearShape shapes[] = {{5, 37, 67}, {1, 9, 13}, {7, 101, 323}, {8, 128, 256}};
    for (const LinearShape s : shapes) {
      const Weights w = make_weights(t, s.n, s.k, rng);
      const std::vector<float> x = randn(size_t(s.m * s.k), rng);
      const Expected ref = linear_reference(w, x.data(), s.m, false);
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(t) << " m=" << s.m << " N=" << s.n << " K=" << s.k);
        std::vector<float> y1(size_t(s.m * s.n), kNaN), y2 = y1;
        one->linear(LinearWeight{w.tensor()}, x.data(), s.m, y1.data());
        two->linear(LinearWeight{w.tensor()}, x.data(), s.m, y2.data());
        expect_within(y2, ref, "linear");
        EXPECT_TRUE(same_bits(y1, y2));
      });
    }
  }
}

// Q4_0, Q4_1, Q8_0 with int8 activations (also through the packed copy prepare_weight makes
// for AVX-512) and dequantized to f32 (QuantCompute::kF32).
TEST_F(BackendConformance, LinearQuantizedWeights) {
  std::mt19937 rng(2);
  int packed_runs = 0;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    const LinearShape shapes[] = {{5, 37, 96}, {7, 101, 320}, {8, 128, 256}};
    for (const LinearShape s : shapes) {
      const Weights w = make_weights(t, s.n, s.k, rng);
      const std::vector<float> x = randn(size_t(s.m * s.k), rng);
      const Expected int8_ref = linear_reference(w, x.data(), s.m, true);
      const Expected f32_ref = linear_reference(w, x.data(), s.m, false);
      for_each_isa([&](const std::string& isa) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(t) << " m=" << s.m << " N=" << s.n << " K=" << s.k);
        std::vector<float> y1(size_t(s.m * s.n), kNaN), y2 = y1;
        one->linear(LinearWeight{w.tensor()}, x.data(), s.m, y1.data());
        two->linear(LinearWeight{w.tensor()}, x.data(), s.m, y2.data());
        expect_within(y2, int8_ref, "int8 linear");
        EXPECT_TRUE(same_bits(y1, y2));
        one_f32->linear(LinearWeight{w.tensor()}, x.data(), s.m, y1.data());
        two_f32->linear(LinearWeight{w.tensor()}, x.data(), s.m, y2.data());
        expect_within(y2, f32_ref, "f32-compute linear");
        EXPECT_TRUE(same_bits(y1, y2));
        if (isa != "avx512") return;
        LinearWeight packed{w.tensor()};
        one->prepare_weight(packed, DType::F32, "w");
        ASSERT_EQ(packing_of(packed), cpu::Packing::kQ8Panels) << "no packed copy under AVX-512";
        ++packed_runs;
        one->linear(packed, x.data(), s.m, y1.data());
        two->linear(packed, x.data(), s.m, y2.data());
        expect_within(y2, int8_ref, "packed linear");
        EXPECT_TRUE(same_bits(y1, y2));
      });
    }
  }
  if (cpu::available_isas().back() == "avx512") {
    EXPECT_EQ(packed_runs, 9);
  }
}

// I8 weights (msModelSlim W8A8, W4A8's int4 codes): prepare_weight packs them as int8 or int4
// panels wherever a SIMD GEMM reads them (AVX-512 and AVX2, not scalar), and the panels give the
// plain rows' bits on one thread and on two.
TEST_F(BackendConformance, LinearInt8WeightsArePackedForEverySimdIsa) {
  std::mt19937 rng(4);
  const int64_t n = 37, k = 200, m = 5;
  for (const bool int4 : {false, true}) {
    std::uniform_int_distribution<int> code(int4 ? -8 : -128, int4 ? 7 : 127);
    std::uniform_real_distribution<float> s(0.001f, 0.02f);
    std::vector<int8_t> codes(size_t(n * k));
    for (int8_t& c : codes) c = int8_t(code(rng));
    std::vector<float> scale(static_cast<size_t>(n));
    for (float& v : scale) v = s(rng);
    LinearWeight plain{Tensor{codes.data(), DType::I8, Shape{n, k}}};
    plain.scales.block = scale.data();
    plain.scales.block_rows = 1;
    plain.scales.block_cols = k;
    const std::vector<float> x = randn(size_t(m * k), rng);
    std::vector<float> rows(size_t(m * n), kNaN);
    cpu::set_linear_isa("scalar");
    one->linear(plain, x.data(), m, rows.data());
    for_each_isa([&](const std::string& isa) {
      SCOPED_TRACE(testing::Message() << "int4 " << int4);
      LinearWeight packed = plain;
      one->prepare_weight(packed, DType::F32, "w");
      EXPECT_EQ(packing_of(packed), isa == "scalar" ? cpu::Packing::kNone
                                    : int4          ? cpu::Packing::kInt4Panels
                                                    : cpu::Packing::kInt8Panels);
      std::vector<float> y1(size_t(m * n), kNaN), y2 = y1;
      one->linear(packed, x.data(), m, y1.data());
      two->linear(packed, x.data(), m, y2.data());
      EXPECT_TRUE(same_bits(rows, y1));
      EXPECT_TRUE(same_bits(rows, y2));
    });
  }
}

// Six weights of mixed dtypes over one x: each against its reference, bit-identical to its own
// linear() call, and across thread counts.
TEST_F(BackendConformance, LinearGroup) {
  std::mt19937 rng(3);
  const DType types[] = {DType::F32,  DType::Q4_0, DType::BF16,
                         DType::Q8_0, DType::Q4_1, DType::F16};
  const int64_t ns[] = {37, 19, 64, 101, 5, 33};
  for (const int64_t k : {96, 320}) {
    const int64_t m = 5;
    std::vector<Weights> ws;
    std::vector<LinearWeight> tensors;
    for (int i = 0; i < 6; ++i) ws.push_back(make_weights(types[i], ns[i], k, rng));
    for (const Weights& w : ws) tensors.emplace_back(w.tensor());
    const std::vector<float> x = randn(size_t(m * k), rng);
    for_each_isa([&](const std::string&) {
      for (const bool int8 : {true, false}) {
        Backend& b1 = int8 ? *one : *one_f32;
        Backend& b2 = int8 ? *two : *two_f32;
        std::vector<std::vector<float>> g1(6), g2(6);
        std::vector<LinearJob> j1, j2;
        for (int i = 0; i < 6; ++i) {
          g1[i].assign(size_t(m * ns[i]), kNaN);
          g2[i] = g1[i];
          LinearJob a, b;
          a.w = b.w = &tensors[i];
          a.y = g1[i].data();
          b.y = g2[i].data();
          j1.push_back(a);
          j2.push_back(b);
        }
        b1.linear_group(j1, x.data(), m);
        b2.linear_group(j2, x.data(), m);
        for (int i = 0; i < 6; ++i) {
          SCOPED_TRACE(testing::Message() << "job " << i << " " << dtype_name(types[i])
                                          << " K=" << k << (int8 ? " int8" : " f32"));
          expect_within(g2[i], linear_reference(ws[i], x.data(), m, int8), "linear_group");
          EXPECT_TRUE(same_bits(g1[i], g2[i]));
          std::vector<float> alone(g1[i].size(), kNaN);
          b2.linear(tensors[i], x.data(), m, alone.data());
          EXPECT_TRUE(same_bits(alone, g2[i])) << "group vs linear()";
        }
      }
    });
  }
}

// ---- Row-wise and element-wise ops ----

// rms_norm as rms_norm specifies it (backend/cpu/ops.h): the scale 1/sqrt(mean(x²) + eps) as an
// f32, x·scale (rounded to act), times w (rounded to act).
Interval rms_norm_bound(double x, double w, double scale, DType act) {
  const Interval s{scale * (1 - 2 * kU), scale * (1 + 2 * kU)};
  const Interval a = rounded_interval(act, x * s.lo, x * s.hi);
  return rounded_interval(act, w * a.lo, w * a.hi);
}

double rms_scale(const float* x, int64_t dim, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
  return 1.0 / std::sqrt(ss / double(dim) + double(eps));
}

TEST_F(BackendConformance, RmsNormAndAddRmsNorm) {
  std::mt19937 rng(4);
  const int64_t rows = 9;
  const float eps = 1e-5f;
  for (const int64_t dim : {67, 256, 1003}) {
    const std::vector<float> x = randn(size_t(rows * dim), rng, 0.0f, 2.0f);
    const std::vector<float> y = randn(x.size(), rng);
    const std::vector<float> w = randn(size_t(dim), rng, 1.0f, 0.5f);
    for (const DType act : {DType::F32, DType::BF16, DType::F16}) {
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message() << "dim " << dim << " act " << dtype_name(act));
        std::vector<float> n1(x.size(), kNaN), n2 = n1;
        one->rms_norm(x.data(), w.data(), eps, rows, dim, n1.data(), act);
        two->rms_norm(x.data(), w.data(), eps, rows, dim, n2.data(), act);
        EXPECT_TRUE(same_bits(n1, n2));
        std::vector<float> x1 = x, x2 = x, o1(x.size(), kNaN), o2 = o1;
        one->add_rms_norm(x1.data(), y.data(), w.data(), eps, rows, dim, o1.data(), act);
        two->add_rms_norm(x2.data(), y.data(), w.data(), eps, rows, dim, o2.data(), act);
        EXPECT_TRUE(same_bits(x1, x2));
        EXPECT_TRUE(same_bits(o1, o2));
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          // The residual: x + y in f32 (correctly rounded: the double sum is exact), then act.
          std::vector<float> sum(static_cast<size_t>(dim));
          for (int64_t i = 0; i < dim; ++i)
            sum[i] = cpu::test::rounded(act, float(double(x[r * dim + i]) + y[r * dim + i]));
          const double s_norm = rms_scale(x.data() + r * dim, dim, eps);
          const double s_add = rms_scale(sum.data(), dim, eps);
          for (int64_t i = 0; i < dim; ++i) {
            const int64_t at = r * dim + i;
            const Interval a = rms_norm_bound(x[at], w[i], s_norm, act);
            const Interval b = rms_norm_bound(sum[i], w[i], s_add, act);
            const bool ok = a.contains(n2[at]) && b.contains(o2[at]) &&
                            std::bit_cast<uint32_t>(x2[at]) == std::bit_cast<uint32_t>(sum[i]);
            if (!ok && bad++ < 3)
              ADD_FAILURE() << "row " << r << " dim " << i << ": rms_norm " << n2[at] << " in ["
                            << a.lo << ", " << a.hi << "]; residual " << x2[at] << " want "
                            << sum[i] << "; add_rms_norm " << o2[at] << " in [" << b.lo << ", "
                            << b.hi << "]";
          }
        }
        EXPECT_EQ(bad, 0);
      });
    }
  }
}

// silu_mul (exp is simd::exp8, ~6 ulps) on a length past the backend's parallel grain, with and
// without out aliasing gate.
TEST_F(BackendConformance, SiluMul) {
  std::mt19937 rng(5);
  const int64_t n = 40003;
  const std::vector<float> g = randn(size_t(n), rng, 0.0f, 4.0f), u = randn(size_t(n), rng);
  for_each_isa([&](const std::string&) {
    std::vector<float> s1(size_t(n), kNaN), s2 = s1, alias = g;
    one->silu_mul(g.data(), u.data(), s1.data(), n, DType::F32);
    two->silu_mul(g.data(), u.data(), s2.data(), n, DType::F32);
    two->silu_mul(alias.data(), u.data(), alias.data(), n, DType::F32);
    EXPECT_TRUE(same_bits(s1, s2));
    EXPECT_TRUE(same_bits(alias, s2)) << "out aliasing gate";
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(g[i]) / (1 + std::exp(-double(g[i]))) * u[i];
      for (const float got : {s1[i], s2[i]})
        if (std::fabs(got - want) > 16 * kU * std::fabs(want) + 1e-37 && bad++ < 3)
          ADD_FAILURE() << "silu_mul " << i << ": " << got << " want " << want;
    }
    EXPECT_EQ(bad, 0);
  });
}

// gelu_tanh_mul past the parallel grain: one and two threads give the same bits, aliasing out
// onto gate too, and each value is within 16 (1 + |2u|) ulps of 0.5 x (1 + tanh(u)) in float64
// (e^(-2u) scales the argument's rounding by |2u|).
TEST_F(BackendConformance, GeluTanhMul) {
  std::mt19937 rng(7);
  const int64_t n = 40003;
  const std::vector<float> g = randn(size_t(n), rng, 0.0f, 4.0f), u = randn(size_t(n), rng);
  std::vector<float> s1(size_t(n), kNaN), s2 = s1, alias = g;
  one->gelu_tanh_mul(g.data(), u.data(), s1.data(), n, DType::F32);
  two->gelu_tanh_mul(g.data(), u.data(), s2.data(), n, DType::F32);
  two->gelu_tanh_mul(alias.data(), u.data(), alias.data(), n, DType::F32);
  EXPECT_TRUE(same_bits(s1, s2));
  EXPECT_TRUE(same_bits(alias, s2)) << "out aliasing gate";
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[size_t(i)];
    const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double want = x / (1 + std::exp(-2 * inner)) * u[size_t(i)];  // = 0.5 x (1 + tanh)
    const double tol = 16 * kU * (1 + 2 * std::fabs(inner)) * std::fabs(want) + 1e-37;
    if (std::fabs(s2[size_t(i)] - want) > tol && bad++ < 3)
      ADD_FAILURE() << "gelu_tanh_mul " << i << ": " << s2[size_t(i)] << " want " << want;
  }
  EXPECT_EQ(bad, 0);
}

// With bf16/f16 activations silu_mul rounds gate and up first, then silu(gate) and the product:
// the same bits as rounding each tensor in its own pass around f32 silu and products.
TEST_F(BackendConformance, SiluMulRoundsToTheActivationDtype) {
  std::mt19937 rng(6);
  const int64_t n = 40003;
  const std::vector<float> g = randn(size_t(n), rng, 0.0f, 4.0f), u = randn(size_t(n), rng);
  for (const DType act : {DType::BF16, DType::F16}) {
    for_each_isa([&](const std::string&) {
      std::vector<float> fused(size_t(n), kNaN), gr = g, ur = u, passes(size_t(n), kNaN);
      two->silu_mul(g.data(), u.data(), fused.data(), n, act);
      // As the reference runs it: silu of the rounded gate, rounded, times the rounded up,
      // rounded.
      one->round_to(act, gr.data(), n);
      one->round_to(act, ur.data(), n);
      const std::vector<float> ones(size_t(n), 1.0f);
      one->silu_mul(gr.data(), ones.data(), passes.data(), n, DType::F32);
      one->round_to(act, passes.data(), n);
      for (int64_t i = 0; i < n; ++i) passes[size_t(i)] *= ur[size_t(i)];
      one->round_to(act, passes.data(), n);
      EXPECT_TRUE(same_bits(fused, passes)) << dtype_name(act);
      std::vector<float> f32_result(static_cast<size_t>(n));
      one->silu_mul(g.data(), u.data(), f32_result.data(), n, DType::F32);
      EXPECT_FALSE(same_bits(fused, f32_result)) << dtype_name(act) << ": nothing was rounded";
    });
  }
}

// Every ISA's silu_mul gives the same bits, in each activation dtype (values spread so that exp
// saturates on both sides).
TEST_F(BackendConformance, SiluMulIsasAgree) {
  std::mt19937 rng(7);
  const int64_t n = 40011;
  const std::vector<float> g = randn(size_t(n), rng, 0.0f, 40.0f), u = randn(size_t(n), rng);
  for (const DType act : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<std::vector<float>> outs;
    for_each_isa([&](const std::string&) {
      outs.emplace_back(size_t(n), kNaN);
      two->silu_mul(g.data(), u.data(), outs.back().data(), n, act);
    });
    for (size_t i = 1; i < outs.size(); ++i)
      EXPECT_TRUE(same_bits(outs[0], outs[i])) << dtype_name(act) << ": ISA " << i;
  }
}

// add_inplace and add_bias: exact f32 adds, on a length past the backend's parallel grain.
TEST_F(BackendConformance, AddInplaceAndAddBias) {
  std::mt19937 rng(13);
  const int64_t n = 40003, rows = 9, cols = 67;
  const std::vector<float> g = randn(static_cast<size_t>(n), rng, 0.0f, 4.0f);
  const std::vector<float> u = randn(static_cast<size_t>(n), rng);
  const std::vector<float> bias = randn(static_cast<size_t>(cols), rng);
  for_each_isa([&](const std::string&) {
    std::vector<float> a1 = u, a2 = u;
    one->add_inplace(a1.data(), g.data(), n);
    two->add_inplace(a2.data(), g.data(), n);
    EXPECT_TRUE(same_bits(a1, a2));
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[i] = float(double(u[i]) + g[i]);
    EXPECT_TRUE(same_bits(a2, want)) << "add_inplace";

    std::vector<float> b1(g.begin(), g.begin() + rows * cols), b2 = b1;
    one->add_bias(b1.data(), bias.data(), rows, cols);
    two->add_bias(b2.data(), bias.data(), rows, cols);
    EXPECT_TRUE(same_bits(b1, b2));
    for (int64_t i = 0; i < rows * cols; ++i) want[i] = float(double(g[i]) + bias[i % cols]);
    EXPECT_TRUE(same_bits(b2.data(), want.data(), b2.size())) << "add_bias";
  });
}

// Round to nearest even onto a binary format with `mant` fraction bits, smallest normal exponent
// emin and largest finite value max_finite; larger magnitudes become infinities.
float round_format(float x, int mant, int emin, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double q = std::ldexp(1.0, std::max(std::ilogb(double(x)), emin) - mant);
  const double r = std::nearbyint(double(x) / q) * q;
  return std::fabs(r) > max_finite ? std::copysign(kInf, x) : float(r);
}

TEST_F(BackendConformance, RoundTo) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-150, 129), bits(0, 0xFFFF);
  std::vector<float> x = {0.0f,      -0.0f,     kInf,          -kInf,
                          65504.0f,  65519.0f,  65520.0f,      -65536.0f,
                          0x1p-24f,  0x1p-25f,  0x1.8p-25f,    0x1p-26f,
                          0x1p-126f, 0x1p-140f, 3.3895314e38f, std::numeric_limits<float>::max(),
                          1.0f,      1.5f};
  for (int i = 0; i < 1000; ++i)
    x.push_back(std::ldexp(mant(rng), exp(rng)) * (i % 2 != 0 ? -1.0f : 1.0f));
  for (int i = 0; i < 200; ++i) {
    // Exact ties of bf16 (low 16 bits 0x8000) and of f16 (midway between neighbours).
    const uint32_t r = std::bit_cast<uint32_t>(x[18 + i]);
    if (std::isfinite(x[18 + i])) x.push_back(std::bit_cast<float>((r & 0xFFFF0000u) | 0x8000u));
    const uint16_t h = uint16_t(bits(rng) % 0x7BFF);
    x.push_back((f16_to_f32(h) + f16_to_f32(uint16_t(h + 1))) / 2);
  }
  x.push_back(kNaN);
  for (const DType dt : {DType::BF16, DType::F16}) {
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      want[i] = dt == DType::BF16 ? round_format(x[i], 7, -126, 0x1.FEp127)
                                  : round_format(x[i], 10, -14, 65504.0);
    for_each_isa([&](const std::string&) {
      std::vector<float> r1 = x, r2 = x;
      one->round_to(dt, r1.data(), int64_t(x.size()));
      two->round_to(dt, r2.data(), int64_t(x.size()));
      EXPECT_TRUE(same_bits(r1.data(), r2.data(), x.size() - 1));
      EXPECT_TRUE(std::isnan(r2.back()));
      EXPECT_TRUE(same_bits(r2.data(), want.data(), x.size() - 1)) << dtype_name(dt);
    });
  }
}

TEST_F(BackendConformance, Embedding) {
  std::mt19937 rng(7);
  const int64_t rows = 50;
  std::vector<int32_t> ids = {0, 49, 3, 3, 17};
  for (int i = 0; i < 18; ++i) ids.push_back(int32_t(rng() % rows));
  const int64_t n = int64_t(ids.size());
  for (const DType t :
       {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    const int64_t dim = dtype_info(t).quantized ? 96 : 67;
    const Weights table = make_weights(t, rows, dim, rng);
    for_each_isa([&](const std::string&) {
      std::vector<float> e1(size_t(n * dim), kNaN), e2 = e1;
      one->embedding(table.tensor(), ids.data(), n, e1.data());
      two->embedding(table.tensor(), ids.data(), n, e2.data());
      EXPECT_TRUE(same_bits(e1, e2));
      int bad = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i < dim; ++i) {
          // Exact but for Q4_1's d·q + m, one f32 rounding.
          const double want = table.deq[ids[r] * dim + i];
          if (std::fabs(e2[r * dim + i] - want) > 2 * kU * std::fabs(want) && bad++ < 3)
            ADD_FAILURE() << dtype_name(t) << " id " << ids[r] << " dim " << i << ": "
                          << e2[r * dim + i] << " want " << want;
        }
      }
      EXPECT_EQ(bad, 0) << dtype_name(t);
    });
  }
}

// Rotary embedding, neox pairs (i, i + rot/2) and interleaved pairs (2i, 2i + 1), whole and
// partial rotation, YaRN's attention factor, f32 and bf16 activations. Reference: the exact
// rotation by θ = pos·inv_freq; the kernel's f32 θ is off by |θ|·u, cos and sin by an ulp.
TEST_F(BackendConformance, Rope) {
  struct Case {
    int head_dim, rot_dim;
    bool interleaved;
    float factor;
    DType act;
  };
  const Case cases[] = {{64, 64, false, 1.0f, DType::F32},  {64, 64, true, 1.0f, DType::F32},
                        {80, 32, false, 1.25f, DType::F32}, {40, 24, true, 1.0f, DType::F32},
                        {64, 64, false, 1.0f, DType::BF16}, {40, 24, true, 1.25f, DType::BF16}};
  std::mt19937 rng(8);
  const int64_t T = 11;
  const int H = 3;
  std::vector<int32_t> pos = {0, 1, 7, 4095};
  while (int64_t(pos.size()) < T) pos.push_back(int32_t(rng() % 600));
  for (const Case& c : cases) {
    std::vector<float> inv(static_cast<size_t>(c.rot_dim / 2));
    for (int i = 0; i < c.rot_dim / 2; ++i) inv[i] = float(std::pow(10000.0, -2.0 * i / c.rot_dim));
    RopeParams p;
    p.inv_freq = inv.data();
    p.rot_dim = c.rot_dim;
    p.attention_factor = c.factor;
    p.interleaved = c.interleaved;
    p.act = c.act;
    const std::vector<float> x = randn(size_t(T * H * c.head_dim), rng);
    for_each_isa([&](const std::string&) {
      SCOPED_TRACE(testing::Message()
                   << "head_dim " << c.head_dim << " rot " << c.rot_dim
                   << (c.interleaved ? " interleaved" : " neox") << " " << dtype_name(c.act));
      std::vector<float> r1 = x, r2 = x;
      one->rope(r1.data(), T, H, c.head_dim, pos.data(), p);
      two->rope(r2.data(), T, H, c.head_dim, pos.data(), p);
      EXPECT_TRUE(same_bits(r1, r2));
      int bad = 0;
      for (int64_t t = 0; t < T; ++t) {
        for (int h = 0; h < H; ++h) {
          const int64_t base = (t * H + h) * c.head_dim;
          for (int i = 0; i < c.rot_dim / 2; ++i) {
            const double theta = double(pos[t]) * inv[i];
            const double err = (std::fabs(theta) + 4) * kU * c.factor;  // in cos·factor, sin·factor
            const double cs = std::cos(theta) * c.factor, sn = std::sin(theta) * c.factor;
            const int64_t ia = base + (c.interleaved ? 2 * i : i);
            const int64_t ib = base + (c.interleaved ? 2 * i + 1 : i + c.rot_dim / 2);
            const double a = x[ia], b = x[ib];
            Interval ra, rb;
            if (c.act == DType::F32) {
              const double e = (std::fabs(a) + std::fabs(b)) * (err + 4 * kU * c.factor);
              ra = {a * cs - b * sn - e, a * cs - b * sn + e};
              rb = {b * cs + a * sn - e, b * cs + a * sn + e};
            } else {
              const Interval C = rounded_interval(c.act, cs - err, cs + err);
              const Interval S = rounded_interval(c.act, sn - err, sn + err);
              const Interval ac = product({a, a}, C), bs = product({-b, -b}, S);
              const Interval bc = product({b, b}, C), as = product({a, a}, S);
              const Interval p1 = rounded_interval(c.act, ac.lo, ac.hi);
              const Interval p2 = rounded_interval(c.act, bs.lo, bs.hi);
              const Interval p3 = rounded_interval(c.act, bc.lo, bc.hi);
              const Interval p4 = rounded_interval(c.act, as.lo, as.hi);
              ra = rounded_interval(c.act, p1.lo + p2.lo, p1.hi + p2.hi);
              rb = rounded_interval(c.act, p3.lo + p4.lo, p3.hi + p4.hi);
            }
            if ((!ra.contains(r2[ia]) || !rb.contains(r2[ib])) && bad++ < 3)
              ADD_FAILURE() << "token " << t << " head " << h << " pair " << i << ": " << r2[ia]
                            << ", " << r2[ib] << " not in [" << ra.lo << ", " << ra.hi << "], ["
                            << rb.lo << ", " << rb.hi << "]";
          }
          EXPECT_TRUE(same_bits(r2.data() + base + c.rot_dim, x.data() + base + c.rot_dim,
                                size_t(c.head_dim - c.rot_dim)))
              << "past rot_dim";
        }
      }
      EXPECT_EQ(bad, 0);
    });
  }
}

// ---- MoE ----

// The j-th choice of each token must be the reference's j-th best up to `tol` in the selection
// score (exact near-ties may swap), and its weight the reference weight of the chosen expert.
TEST_F(BackendConformance, MoeRoute) {
  std::mt19937 rng(9);
  const int64_t T = 37;
  for (const bool grouped : {false, true}) {
    for (const bool norm : {false, true}) {
      const int E = grouped ? 64 : 60, k = grouped ? 6 : 4;
      const std::vector<float> logits = randn(size_t(T * E), rng, 0.0f, 2.0f);
      const std::vector<float> bias = randn(size_t(E), rng, 0.0f, 0.1f);
      MoeRouting r;
      r.kind = grouped ? MoeRouting::Kind::kGroupedSigmoid : MoeRouting::Kind::kSoftmaxTopK;
      r.num_experts = E;
      r.top_k = k;
      r.norm_topk_prob = norm;
      r.n_group = grouped ? 8 : 1;
      r.topk_group = grouped ? 3 : 1;
      r.routed_scaling_factor = grouped ? 2.5f : 1.0f;
      r.bias = grouped ? bias.data() : nullptr;
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message()
                     << (grouped ? "grouped sigmoid" : "softmax") << (norm ? " norm" : ""));
        std::vector<int32_t> i1(size_t(T * k), -1), i2 = i1;
        std::vector<float> w1(size_t(T * k), kNaN), w2 = w1;
        one->moe_route(logits.data(), T, r, i1.data(), w1.data());
        two->moe_route(logits.data(), T, r, i2.data(), w2.data());
        EXPECT_TRUE(same_bits(i1, i2));
        EXPECT_TRUE(same_bits(w1, w2));
        for (int64_t t = 0; t < T; ++t) {
          const float* l = logits.data() + t * E;
          std::vector<double> u(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
          double mx = -1e300, sum = 0;
          for (int e = 0; e < E; ++e) mx = std::max(mx, double(l[e]));
          for (int e = 0; e < E; ++e) sum += std::exp(l[e] - mx);
          for (int e = 0; e < E; ++e) {
            u[e] = grouped ? 1 / (1 + std::exp(-double(l[e]))) : std::exp(l[e] - mx) / sum;
            sel[e] = grouped ? u[e] + bias[e] : u[e];
          }
          // Experts eligible: all (softmax), or those of the topk_group best groups.
          std::vector<double> eligible = sel;
          if (grouped) {
            const int gs = E / r.n_group;
            std::vector<double> score(static_cast<size_t>(r.n_group));
            for (int g = 0; g < r.n_group; ++g) {
              std::vector<double> v(sel.begin() + g * gs, sel.begin() + (g + 1) * gs);
              std::sort(v.rbegin(), v.rend());
              score[g] = v[0] + v[1];
            }
            std::vector<double> sorted = score;
            std::sort(sorted.rbegin(), sorted.rend());
            for (int e = 0; e < E; ++e)
              if (score[e / gs] < sorted[r.topk_group - 1] - 1e-5) eligible[e] = -1e300;
          }
          std::vector<double> best = eligible;
          std::sort(best.rbegin(), best.rend());
          double chosen = 0;
          for (int j = 0; j < k; ++j) chosen += u[i2[t * k + j]];
          for (int j = 0; j < k; ++j) {
            const int32_t id = i2[t * k + j];
            ASSERT_TRUE(id >= 0 && id < E) << id;
            EXPECT_EQ(std::count(i2.begin() + t * k, i2.begin() + t * k + k, id), 1);
            EXPECT_NEAR(eligible[id], best[j], 1e-5 * best[0]) << "token " << t << " choice " << j;
            const double want = (norm ? u[id] / chosen : u[id]) * r.routed_scaling_factor;
            EXPECT_NEAR(w2[t * k + j], want, (E + k + 32) * kU * want)
                << "token " << t << " choice " << j;
          }
        }
      });
    }
  }
}

// Permutation by expert (stable: tokens ascending within an expert) and the weighted combine,
// f32 or rounded to bf16/f16 at every step (round_each).
TEST_F(BackendConformance, MoePermuteAndCombine) {
  std::mt19937 rng(10);
  const int64_t T = 37, H = 67;
  const int k = 4, E = 60;
  std::vector<int32_t> ids;
  std::vector<int32_t> experts(static_cast<size_t>(E));
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(experts.begin(), experts.begin() + 40, rng);  // experts 40..59 get no tokens
    ids.insert(ids.end(), experts.begin(), experts.begin() + k);
  }
  const std::vector<float> x = randn(size_t(T * H), rng);
  MoePermutation want;
  want.offsets.push_back(0);
  want.row_of_slot.assign(size_t(T * k), -1);
  for (int e = 0; e < E; ++e) {
    for (int64_t i = 0; i < T * k; ++i) {
      if (ids[i] != e) continue;
      want.row_of_slot[i] = int32_t(want.token.size());
      want.token.push_back(int32_t(i / k));
    }
    want.offsets.push_back(int32_t(want.token.size()));
  }
  const std::vector<float> expert_out = randn(size_t(T * k * H), rng);
  std::vector<float> weights(static_cast<size_t>(T * k));
  for (float& w : weights) w = std::uniform_real_distribution<float>(0.05f, 0.6f)(rng);
  for_each_isa([&](const std::string&) {
    MoePermutation p1, p2;
    std::vector<float> x1(size_t(T * k * H), kNaN), x2 = x1;
    one->moe_permute(x.data(), T, H, ids.data(), k, E, p1, x1.data());
    two->moe_permute(x.data(), T, H, ids.data(), k, E, p2, x2.data());
    EXPECT_EQ(p2.offsets, want.offsets);
    EXPECT_EQ(p2.token, want.token);
    EXPECT_EQ(p2.row_of_slot, want.row_of_slot);
    EXPECT_EQ(p1.offsets, p2.offsets);
    EXPECT_EQ(p1.token, p2.token);
    EXPECT_EQ(p1.row_of_slot, p2.row_of_slot);
    EXPECT_TRUE(same_bits(x1, x2));
    for (size_t r = 0; r < want.token.size(); ++r)
      EXPECT_TRUE(same_bits(x2.data() + r * H, x.data() + want.token[r] * H, size_t(H)))
          << "row " << r;

    const std::pair<bool, DType> modes[] = {
        {false, DType::F32}, {false, DType::BF16}, {true, DType::BF16}, {true, DType::F16}};
    for (const auto& [round_each, act] : modes) {
      SCOPED_TRACE(testing::Message() << (round_each ? "round_each " : "") << dtype_name(act));
      std::vector<float> c1(size_t(T * H), kNaN), c2 = c1;
      one->moe_combine(expert_out.data(), want, weights.data(), T, k, H, round_each, act,
                       c1.data());
      two->moe_combine(expert_out.data(), want, weights.data(), T, k, H, round_each, act,
                       c2.data());
      EXPECT_TRUE(same_bits(c1, c2));
      int bad = 0;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < H; ++i) {
          double sum = 0, mag = 0;
          float o = 0.0f;  // round_each: each step is one correctly rounded f32 op, then act
          for (int j = 0; j < k; ++j) {
            const double v = expert_out[want.row_of_slot[t * k + j] * H + i];
            sum += v * weights[t * k + j];
            mag += std::fabs(v * weights[t * k + j]);
            const float wj = cpu::test::rounded(act, weights[t * k + j]);
            const float prod = cpu::test::rounded(act, float(v * wj));
            o = cpu::test::rounded(act, float(double(o) + prod));
          }
          const double e = 2 * k * kU * mag;
          const Interval b = round_each ? Interval{o, o} : rounded_interval(act, sum - e, sum + e);
          if (!b.contains(c2[t * H + i]) && bad++ < 3)
            ADD_FAILURE() << "token " << t << " dim " << i << ": " << c2[t * H + i] << " not in ["
                          << b.lo << ", " << b.hi << "]";
        }
      }
      EXPECT_EQ(bad, 0);
    }
  });
}

}  // namespace
}  // namespace kestrel::conformance
