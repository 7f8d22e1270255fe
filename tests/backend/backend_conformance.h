// tests/backend/backend_conformance.h — what the backend conformance tests share
// (backend_conformance_test.cc, backend_conformance_attention_test.cc,
// backend_conformance_sampling_test.cc): the fixture that runs
// each op on every ISA this CPU has with a 1-thread and a 2-thread CPU backend, random inputs,
// bitwise comparison, and intervals for results rounded to a reduced-precision dtype.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/attention_reference.h"
#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/linear_checks.h"
#include "base/fp16.h"

namespace kestrel::conformance {

using cpu::test::Interval;
constexpr double kU = 0x1p-24;  // f32 unit roundoff

inline std::vector<float> randn(size_t n, std::mt19937& rng, float mean = 0.0f,
                                float stddev = 1.0f) {
  std::normal_distribution<float> nd(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// What a value in [lo, hi] reads back as once computed in f32 and then rounded to t (F32: only
// the f32 rounding). Rounding is monotonic, so the ends bound every outcome.
inline Interval rounded_interval(DType t, double lo, double hi) {
  if (lo > hi) std::swap(lo, hi);
  return {cpu::test::rounded(t, cpu::test::detail::down(lo)),
          cpu::test::rounded(t, cpu::test::detail::up(hi))};
}

// The range of a·b for a in [a.lo, a.hi] and b in [b.lo, b.hi].
inline Interval product(Interval a, Interval b) {
  const double p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  return {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
}

// The unit roundoff of rounding to t, and the most a rounding to t moves a value below its
// normal range (f16's subnormals: half their spacing).
inline double unit(DType t) {
  return t == DType::BF16 ? 0x1p-8 : t == DType::F16 ? 0x1p-11 : kU;
}
inline double tiny(DType t) {
  return t == DType::F16 ? 0x1p-25 : 0.0;
}

// Whether every value is one of t's: an op's last step rounded to t.
inline ::testing::AssertionResult rounded_to(DType t, const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (cpu::test::rounded(t, v[i]) != v[i])
      return ::testing::AssertionFailure()
             << "value " << i << " (" << v[i] << ") is no " << dtype_name(t);
  return ::testing::AssertionSuccess();
}

// Bitwise equality of n elements, naming the first that differs and counting them.
template <typename T>
::testing::AssertionResult same_bits(const T* a, const T* b, size_t n) {
  size_t first = n, count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, sizeof(T)) == 0) continue;
    if (count++ == 0) first = i;
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count << " of " << n << " elements differ, the first "
                                       << first << ": " << a[first] << " vs " << b[first];
}
template <typename T, typename A>
::testing::AssertionResult same_bits(const std::vector<T, A>& a, const std::vector<T, A>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  return same_bits(a.data(), b.data(), a.size());
}

// Each test runs its ops on every ISA this machine runs (linear_checks.h: an ISA the CPU lacks
// is the only one left out), on a 1-thread and a 2-thread backend (`one`, `two`), plus the same
// pair multiplying quantized weights in f32 (`one_f32`, `two_f32`).
class ConformanceTest : public ::testing::Test {
 protected:
  void TearDown() override { cpu::set_linear_isa("auto"); }

  template <typename Fn>
  void for_each_isa(Fn&& fn) {
    const std::vector<std::string> isas = cpu::available_isas();
    ASSERT_FALSE(isas.empty());
    for (const std::string& isa : isas) {
      cpu::set_linear_isa(isa.c_str());
      ASSERT_EQ(std::string(cpu::linear_isa()), isa);
      SCOPED_TRACE("isa " + isa);
      fn(isa);
    }
    cpu::set_linear_isa("auto");
  }

  std::unique_ptr<Backend> one = make_cpu_backend(1), two = make_cpu_backend(2);
  std::unique_ptr<Backend> one_f32 = make_cpu_backend(1, QuantCompute::kF32),
                           two_f32 = make_cpu_backend(2, QuantCompute::kF32);
};

}  // namespace kestrel::conformance
