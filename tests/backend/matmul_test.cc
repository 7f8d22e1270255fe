// linear() for every weight dtype and every ISA this CPU has, against float64 references
// computed from the dequantized weights.
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/linear_checks.h"
#include "base/fp16.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                              DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};

struct Weights {
  DType type;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<double> deq;  // [n, k], exactly the values the format encodes
  LinearWeight tensor() const { return LinearWeight{Tensor{bytes.data(), type, Shape{n, k}}}; }
  size_t row_bytes() const { return dtype_bytes(type, k); }
};

Weights make_weights(DType t, int64_t n, int64_t k, uint32_t seed) {
  Weights w{t, n, k, std::vector<uint8_t>(dtype_bytes(t, n * k)), std::vector<double>(n * k)};
  const auto src = randn(n * k, seed);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    uint8_t* q = w.bytes.data() + j * w.row_bytes();
    quantize_row(t, src.data() + j * k, q, k);
    dequantize_row(t, q, row.data(), k);
    std::copy(row.begin(), row.end(), w.deq.begin() + j * k);
  }
  return w;
}

// The int8 format each weight type's dot product quantizes activations to (F32 = none).
DType activation_format(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::MXFP4:
      return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return DType::Q8_1;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return DType::Q8_K;
    default:
      return DType::F32;
  }
}

// One activation row as the integer kernels see it: the decoded int8 values, and for the formats
// with a min the per-block s the min term uses: the exact f32 d * sum(codes) (q8_block_dot.h's
// Q8S rows; Q8_0's codes and d otherwise).
struct QuantizedRow {
  std::vector<double> x;
  std::vector<double> s;
};

QuantizedRow quantized_activation(DType act, const float* x, int64_t k) {
  QuantizedRow q{std::vector<double>(x, x + k), {}};
  if (act == DType::Q8_0) {
    std::vector<BlockQ8_0> b(k / 32);
    quantize_row_q8_0(x, b.data(), k);
    for (int64_t i = 0; i < k; ++i) q.x[i] = double(f16_to_f32(b[i / 32].d)) * b[i / 32].qs[i % 32];
  } else if (act == DType::Q8_1) {
    std::vector<BlockQ8_1> b(k / 32);
    quantize_row_q8_1(x, b.data(), k);
    for (int64_t i = 0; i < k; ++i) q.x[i] = double(f16_to_f32(b[i / 32].d)) * b[i / 32].qs[i % 32];
    for (const auto& blk : b) {
      int sum = 0;
      for (int8_t c : blk.qs) sum += c;
      q.s.push_back(f16_to_f32(blk.d) * float(sum));
    }
  } else if (act == DType::Q8_K) {
    std::vector<BlockQ8_K> b(k / 256);
    quantize_row_q8_k(x, b.data(), k);
    for (int64_t i = 0; i < k; ++i) q.x[i] = double(b[i / 256].d) * b[i / 256].qs[i % 256];
  }
  return q;
}

// For output (m, j):
//  tight: what the integer dot product defines — the dequantized weights times the dequantized
//    int8 activations (for Q8_1, the block's min m times the stored s instead of m * sum(x)).
//    Only f32 rounding separates the kernel from it: |y - tight| <= 1e-5 * tight_scale.
//  exact: the dequantized weights times the original f32 activations. The gap is activation
//    quantization: per activation block b with largest |x| = a_b, every value is off by at most
//    delta_b = a_b * (0.5/127 + 2^-11) (half a code step, plus the f16 rounding of d moving a
//    code of up to 127 by 2^-11 relative), giving delta_b * sum_{k in b} |w_k|. For Q8_1, with
//    w = d*q + m, the min term adds |m| * (64 * delta_b + a_b / 32): |d*q| <= |w| + |m| over 32
//    values, and s is off from sum(x) by 32 * delta_b plus twice the f16 rounding of
//    d * sum(codes), which is at most 32 * a_b.
struct Reference {
  std::vector<double> tight, tight_scale, exact, exact_bound;
};

Reference reference(const Weights& w, const std::vector<float>& x, int64_t m) {
  const DType act = activation_format(w.type);
  const int64_t k = w.k, ab = act == DType::Q8_K ? 256 : 32;
  const int wb = dtype_info(w.type).block_bytes;
  Reference r;
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x.data() + i * k;
    const QuantizedRow q = quantized_activation(act, xr, k);
    for (int64_t j = 0; j < w.n; ++j) {
      const double* wr = w.deq.data() + j * k;
      double tight = 0, scale = 0, exact = 0, abs_exact = 0, bound = 0;
      for (int64_t b = 0; b * ab < k; ++b) {
        double amax = 0, abs_w = 0;
        for (int64_t l = b * ab; l < (b + 1) * ab && l < k; ++l) {
          amax = std::max(amax, std::fabs(double(xr[l])));
          abs_w += std::fabs(wr[l]);
          exact += wr[l] * xr[l];
          abs_exact += std::fabs(wr[l] * xr[l]);
        }
        const double delta = amax * (0.5 / 127 + 1.0 / 2048);
        if (act != DType::F32) bound += delta * abs_w;
        const double mw = act == DType::Q8_1
                              ? f16_to_f32(uint16_t(w.bytes[j * w.row_bytes() + b * wb + 2] |
                                                    (w.bytes[j * w.row_bytes() + b * wb + 3] << 8)))
                              : 0.0;
        for (int64_t l = b * ab; l < (b + 1) * ab && l < k; ++l) {
          tight += (wr[l] - mw) * q.x[l];
          scale += std::fabs((wr[l] - mw) * q.x[l]);
        }
        if (act == DType::Q8_1) {
          tight += mw * q.s[b];
          scale += std::fabs(mw * q.s[b]);
          bound += std::fabs(mw) * (64 * delta + amax / 32);
        }
      }
      r.tight.push_back(tight);
      r.tight_scale.push_back(scale);
      r.exact.push_back(exact);
      r.exact_bound.push_back(bound + 1e-5 * abs_exact);
    }
  }
  return r;
}

std::vector<double> scaled(const std::vector<double>& v, double f) {
  std::vector<double> out(v);
  for (auto& e : out) e *= f;
  return out;
}

class LinearTest : public ::testing::TestWithParam<DType> {
 protected:
  void TearDown() override { set_linear_isa("auto"); }
  int64_t block() const { return dtype_info(GetParam()).block_elems; }
  // Smallest K of at least `want` that holds whole blocks.
  int64_t round_k(int64_t want) const { return (want + block() - 1) / block() * block(); }
};

TEST_P(LinearTest, MatchesFloat64ReferenceOnEveryIsa) {
  const DType t = GetParam();
  const auto isas = available_isas();
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (int64_t k : {32, 96, 256, 512}) {
    if (k % block() != 0) continue;
    for (int64_t n : {1, 7, 33, 130}) {
      const Weights w = make_weights(t, n, k, seed++);
      for (int64_t m : {1, 2, 3, 5, 17}) {
        const auto x = randn(m * k, seed++);
        const Reference ref = reference(w, x, m);
        std::vector<float> y_first;
        for (const auto& isa : isas) {
          SCOPED_TRACE(testing::Message() << isa << " M=" << m << " N=" << n << " K=" << k);
          set_linear_isa(isa.c_str());
          std::vector<float> y(m * n, -1.0f);
          linear(w.tensor(), x.data(), m, y.data(), pool);
          Mismatches bad;
          bad.check(y, ref.tight, scaled(ref.tight_scale, 1e-5), "vs tight reference");
          bad.check(y, ref.exact, ref.exact_bound, "vs exact reference");
          EXPECT_EQ(bad.count, 0) << bad.first;
          // One arithmetic per format: every ISA gives the first one's bits.
          if (y_first.empty())
            y_first = y;
          else
            EXPECT_EQ(std::memcmp(y.data(), y_first.data(), y.size() * sizeof(float)), 0)
                << "against " << isas[0];
        }
      }
    }
  }
}

TEST_P(LinearTest, ThreadCountDoesNotChangeResults) {
  const int64_t m = 3, n = 301, k = round_k(512);
  const Weights w = make_weights(GetParam(), n, k, 7);
  const auto x = randn(m * k, 8);
  ThreadPool one(1), three(3);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    std::vector<float> a(m * n), b(m * n);
    linear(w.tensor(), x.data(), m, a.data(), one);
    linear(w.tensor(), x.data(), m, b.data(), three);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << isa;
  }
}

// Batch invariance: a row's output is bit-identical whether it runs alone or in a batch (at
// any position in the activation tiles).
TEST_P(LinearTest, RowsDoNotDependOnBatch) {
  const int64_t m = 7, n = 33, k = round_k(512);
  const Weights w = make_weights(GetParam(), n, k, 9);
  const auto x = randn(m * k, 10);
  ThreadPool pool(2);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    std::vector<float> all(m * n), one(n);
    linear(w.tensor(), x.data(), m, all.data(), pool);
    for (int64_t i = 0; i < m; ++i) {
      linear(w.tensor(), x.data() + i * k, 1, one.data(), pool);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)), 0)
          << isa << " row " << i;
    }
  }
}

// QuantCompute::kF32: the dequantized weights times the f32 activations, with no activation
// quantization, so only f32 summation separates it from the float64 product.
TEST_P(LinearTest, F32QuantComputeMatchesDequantizedProduct) {
  const DType t = GetParam();
  ThreadPool pool(2);
  const int64_t k = round_k(512), n = 33, m = 5;
  const Weights w = make_weights(t, n, k, 7);
  const auto x = randn(m * k, 8);
  std::vector<float> y(m * n, -1.0f);
  linear(w.tensor(), x.data(), m, y.data(), pool, QuantCompute::kF32);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        ref += w.deq[j * k + i] * x[r * k + i];
        mag += std::fabs(w.deq[j * k + i] * x[r * k + i]);
      }
      EXPECT_NEAR(y[r * n + j], ref, 1e-5 * mag) << "row " << r << " col " << j;
    }
  }
}

// A group of weights of mixed dtypes over one x gives, bit for bit, what separate calls give.
TEST(LinearGroup, EqualsSeparateCallsBitwise) {
  const int64_t k = 512, m = 6;
  const Weights a = make_weights(DType::Q4_1, 40, k, 1), b = make_weights(DType::Q8_0, 9, k, 2),
                c = make_weights(DType::F16, 17, k, 3), d = make_weights(DType::Q6_K, 5, k, 4);
  const auto x = randn(m * k, 5);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    const Weights* ws[4] = {&a, &b, &c, &d};
    std::vector<std::vector<float>> sep(4), grp(4);
    std::vector<LinearWeight> tensors;
    for (const Weights* w : ws) tensors.push_back(w->tensor());
    std::vector<LinearJob> jobs;
    for (int i = 0; i < 4; ++i) {
      sep[i].assign(m * ws[i]->n, -1.0f);
      grp[i].assign(m * ws[i]->n, -2.0f);
      linear(tensors[i], x.data(), m, sep[i].data(), pool);
      jobs.push_back({&tensors[i], grp[i].data()});
    }
    linear_group(jobs, x.data(), m, pool);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(grp[i], sep[i]) << "job " << i << " threads " << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, LinearTest, ::testing::ValuesIn(kWeightTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Float weights take any K; lengths that are not a multiple of the vector width exercise tails.
TEST(LinearFloat, OddLengths) {
  ThreadPool pool(1);
  uint32_t seed = 50;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t k : {1, 7, 13, 45, 100}) {
      const int64_t n = 9;
      const Weights w = make_weights(t, n, k, seed++);
      for (int64_t m : {1, 5}) {
        const auto x = randn(m * k, seed++);
        const Reference ref = reference(w, x, m);
        std::vector<float> y_first;
        for (const auto& isa : available_isas()) {
          SCOPED_TRACE(testing::Message()
                       << dtype_name(t) << " " << isa << " M=" << m << " K=" << k);
          set_linear_isa(isa.c_str());
          std::vector<float> y(m * n);
          linear(w.tensor(), x.data(), m, y.data(), pool);
          Mismatches bad;
          bad.check(y, ref.exact, ref.exact_bound, "vs exact reference");
          EXPECT_EQ(bad.count, 0) << bad.first;
          if (y_first.empty())
            y_first = y;
          else
            EXPECT_EQ(std::memcmp(y.data(), y_first.data(), y.size() * sizeof(float)), 0);
        }
      }
    }
  }
  set_linear_isa("auto");
}

TEST(LinearIsa, ReportsAndRestoresDetection) {
  set_linear_isa("scalar");
  EXPECT_STREQ(linear_isa(), "scalar");
  set_linear_isa("auto");
  const std::string best = linear_isa();
  EXPECT_TRUE(best == "avx512" || best == "avx2" || best == "scalar") << best;
  set_linear_isa("avx512");  // falls back when the CPU lacks it
  EXPECT_EQ(std::string(linear_isa()), best);
  set_linear_isa("auto");
}

TEST(LinearDeathTest, RejectsPartialBlocksAndUnsupportedTypes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> wbytes(4096);
  std::vector<float> x(64, 1.0f), y(4);
  ThreadPool pool(1);
  const LinearWeight partial{Tensor{wbytes.data(), DType::Q4_K, Shape{2, 64}}};
  EXPECT_DEATH(linear(partial, x.data(), 1, y.data(), pool), "not a multiple");
  const LinearWeight ints{Tensor{wbytes.data(), DType::I32, Shape{2, 32}}};
  EXPECT_DEATH(linear(ints, x.data(), 1, y.data(), pool), "unsupported weight dtype");
}

}  // namespace
}  // namespace kestrel::cpu
