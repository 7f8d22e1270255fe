// tests/backend/linear_checks.h — what the linear-kernel tests share: seeded random inputs, the
// ISAs this machine runs, a collector of outputs that miss their reference by more than a
// per-output bound, and the check that rows do not depend on the batch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// n values from a normal distribution (mean 0, standard deviation scale), seeded.
inline std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

// The ISAs this machine runs, scalar first.
inline std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (const char* isa : {"scalar", "avx2", "avxvnni", "avx512"}) {
    set_linear_isa(isa);
    if (std::string(linear_isa()) == isa) out.push_back(isa);
  }
  set_linear_isa("auto");
  return out;
}

// Batch invariance on every ISA: each of the m rows of x gives the same bits alone as in the
// batch, and a batch that starts three rows later (each row elsewhere in its tile) too.
inline void expect_rows_do_not_depend_on_batch(const LinearWeight& w, const std::vector<float>& x,
                                               int64_t m) {
  const int64_t n = w.rows(), k = w.cols();
  ThreadPool pool(2);
  for (const auto& isa : available_isas()) {
    set_linear_isa(isa.c_str());
    std::vector<float> all(size_t(m * n)), part(size_t(m * n));
    linear(w, x.data(), m, all.data(), pool);
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> one(static_cast<size_t>(n));
      linear(w, x.data() + i * k, 1, one.data(), pool);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + i * n, size_t(n) * sizeof(float)), 0)
          << isa << " row " << i;
    }
    linear(w, x.data() + 3 * k, m - 3, part.data(), pool);
    EXPECT_EQ(std::memcmp(part.data(), all.data() + 3 * n, size_t((m - 3) * n) * sizeof(float)), 0)
        << isa;
  }
  set_linear_isa("auto");
}

// Counts outputs with |got - want| > bound and describes the first.
struct Mismatches {
  int count = 0;
  std::string first;
  void check(const std::vector<float>& got, const std::vector<double>& want,
             const std::vector<double>& bound, const char* what) {
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::fabs(got[i] - want[i]) <= bound[i]) continue;
      if (count++ == 0) {
        std::ostringstream s;
        s << what << ": output " << i << " got " << got[i] << " want " << want[i] << " bound "
          << bound[i];
        first = s.str();
      }
    }
  }
};

}  // namespace kestrel::cpu
