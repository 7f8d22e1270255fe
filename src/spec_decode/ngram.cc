#include "spec_decode/ngram.h"

#include <algorithm>

namespace kestrel {

std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int64_t min_n, int64_t max_n,
                                   int64_t k) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (k <= 0 || n < 2 || n < min_n || max_n < 1) return {};
  // Over the reversed history r, z[i] is the length of the longest common prefix of r and
  // r[i..]: an occurrence of the history's last z[i] tokens that ends at original index
  // n - 1 - i. The longest such match (capped at max_n) wins, and among equal lengths the
  // largest i, i.e. the earliest occurrence.
  auto r = [&](int64_t i) { return tokens[size_t(n - 1 - i)]; };
  std::vector<int64_t> z(size_t(n), 0);
  int64_t best_len = 0, best_i = 0;
  for (int64_t i = 1, left = 0, right = 0; i < n; ++i) {
    int64_t len = i < right ? std::min(right - i, z[size_t(i - left)]) : 0;
    while (i + len < n && r(len) == r(i + len)) ++len;
    z[size_t(i)] = len;
    if (i + len > right) left = i, right = i + len;
    const int64_t capped = std::min(len, max_n);
    if (capped > 0 && capped >= best_len) best_len = capped, best_i = i;
  }
  if (best_len < min_n) return {};
  // The drafts follow the occurrence, which ends at n - 1 - best_i.
  const int64_t from = n - best_i;
  const int64_t count = std::min(k, n - from);
  return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
}

}  // namespace kestrel
