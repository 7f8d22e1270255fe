#include "bench/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"

namespace kestrel::bench {
namespace {

// log-softmax of v in float64; returns the argmax.
size_t log_softmax(std::span<const float> v, std::vector<double>& out) {
  out.resize(v.size());
  const size_t top = size_t(std::max_element(v.begin(), v.end()) - v.begin());
  const double mx = v[top];
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) sum += std::exp(double(v[i]) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < v.size(); ++i) out[i] = double(v[i]) - lse;
  return top;
}

}  // namespace

void add_position(KlStats& s, std::span<const float> ref_logits, std::span<const float> test_logits,
                  int32_t next_token) {
  KCHECK(ref_logits.size() == test_logits.size() && next_token >= 0 &&
             size_t(next_token) < ref_logits.size(),
         "add_position: {} reference and {} test logits, next token {}", ref_logits.size(),
         test_logits.size(), next_token);
  std::vector<double> p, q;
  const size_t top_p = log_softmax(ref_logits, p), top_q = log_softmax(test_logits, q);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
  kl = std::max(kl, 0.0);  // rounding can leave −1e-17 where the two are equal
  s.positions++;
  s.kl_sum += kl;
  s.kl_sq_sum += kl * kl;
  s.kl_max = std::max(s.kl_max, kl);
  s.top1_same += top_p == top_q;
  s.nll_ref -= p[size_t(next_token)];
  s.nll_test -= q[size_t(next_token)];
}

double KlStats::mean_kl() const {
  return positions > 0 ? kl_sum / double(positions) : 0.0;
}

double KlStats::kl_stderr() const {
  if (positions < 2) return 0.0;
  const double n = double(positions), m = mean_kl();
  const double var = std::max(0.0, (kl_sq_sum - n * m * m) / (n - 1));
  return std::sqrt(var / n);
}

double KlStats::top1_agreement() const {
  return positions > 0 ? double(top1_same) / double(positions) : 0.0;
}

double KlStats::ppl_ref() const {
  return positions > 0 ? std::exp(nll_ref / double(positions)) : 0.0;
}

double KlStats::ppl_test() const {
  return positions > 0 ? std::exp(nll_test / double(positions)) : 0.0;
}

}  // namespace kestrel::bench
