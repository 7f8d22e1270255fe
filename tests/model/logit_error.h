// tests/model/logit_error.h — how the model tests compare logits: per row of `vocab` values,
// max |a − b| / max |b| (the largest difference against the row's largest logit), the worst row's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace kestrel::test {

// Over `rows` rows; the worst row's index goes to *worst_row when given.
inline double max_row_rel_err(const float* a, const float* b, int64_t rows, int64_t vocab,
                              size_t* worst_row = nullptr) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      diff = std::max(diff, std::fabs(double(a[r * vocab + i]) - b[r * vocab + i]));
      mag = std::max(mag, std::fabs(double(b[r * vocab + i])));
    }
    if (diff / mag > worst && worst_row != nullptr) *worst_row = size_t(r);
    worst = std::max(worst, diff / mag);
  }
  return worst;
}

}  // namespace kestrel::test
