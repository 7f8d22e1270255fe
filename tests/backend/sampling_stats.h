// Float64 references and Pearson's chi-square for the sampling tests: the distribution a
// sampler must draw from, and how far a histogram of its draws is from it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kestrel::test {

// Chi-square critical values at significance 0.001, indexed by degrees of freedom.
constexpr double kChi2Critical[] = {0.0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458};

template <typename T>
std::vector<double> softmax(const std::vector<T>& logits, double temperature = 1.0) {
  double max = -std::numeric_limits<double>::infinity();
  for (T l : logits) max = std::max(max, double(l) / temperature);
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i)
    sum += p[i] = std::exp(double(logits[i]) / temperature - max);
  for (double& x : p) x /= sum;
  return p;
}

inline std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Pearson chi-square of the counts against `expected` (tokens with zero probability must not
// occur).
inline double chi_square(const std::vector<int>& counts, const std::vector<double>& expected) {
  const double n = std::accumulate(counts.begin(), counts.end(), 0.0);
  double stat = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has zero probability";
      continue;
    }
    const double e = n * expected[i];
    stat += (counts[i] - e) * (counts[i] - e) / e;
  }
  return stat;
}

}  // namespace kestrel::test
