// backend/cpu/sampling.cc — one logits row to one token, following vLLM's v1 sampler: penalties,
// then greedy or temperature → min-p → top-k → top-p → a draw from the softmax.
#include "backend/cpu/sampling.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iterator>
#include <limits>
#include <vector>

#include "backend/cpu/simd_math.h"

namespace kestrel::cpu {
namespace {

constexpr float kGreedyEpsilon = 1e-5f;  // vLLM treats smaller temperatures as greedy
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kMaxHeapTopK = 1024;

struct Candidate {
  float logit = 0.0f;
  int32_t id = 0;
  float weight = 0.0f;  // exp(logit - max logit), the unnormalised probability
};

// Higher logit first; equal logits by lower id, so every selection and sort is deterministic.
bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

bool in_vocab(int32_t token, size_t vocab) {
  return token >= 0 && static_cast<size_t>(token) < vocab;
}

// Token ids outside the vocabulary are ignored rather than trusted as indices.
void apply_penalties(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> prompt_tokens,
                     std::span<const int32_t> output_tokens) {
  const size_t vocab = logits.size();
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(vocab, 0);
    auto penalise = [&](int32_t t) {
      if (!in_vocab(t, vocab) || seen[t]) return;
      seen[t] = 1;
      float& l = logits[t];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t t : prompt_tokens) penalise(t);
    for (int32_t t : output_tokens) penalise(t);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::vector<int32_t> sorted(output_tokens.begin(), output_tokens.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      if (in_vocab(sorted[i], vocab)) {
        float& l = logits[sorted[i]];
        l -= p.frequency_penalty * static_cast<float>(j - i);
        l -= p.presence_penalty;
      }
      i = j;
    }
  }
}

// Lowest id among the maximal logits; NaN never wins.
int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_logit = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_logit) {
      best_logit = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

double log_sum_exp(std::span<const float> logits) {
  const float max = logits[argmax(logits)];
  if (!(max > kNegInf)) return kNegInf;
  double sum = 0.0;
  for (float l : logits) {
    if (l > kNegInf) sum += std::exp(static_cast<double>(l) - max);
  }
  return max + std::log(sum);
}

// The n best tokens, best first, through a bounded heap whose front is the worst kept entry.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, size_t n, double lse) {
  std::vector<Candidate> heap;
  heap.reserve(n);
  for (size_t i = 0; i < logits.size() && n > 0; ++i) {
    if (std::isnan(logits[i])) continue;
    const Candidate c{logits[i], static_cast<int32_t>(i), 0.0f};
    if (heap.size() < n) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  std::vector<TokenLogprob> top;
  top.reserve(heap.size());
  for (const Candidate& c : heap) {
    top.push_back({c.id, static_cast<float>(static_cast<double>(c.logit) - lse)});
  }
  return top;
}

void drop(std::span<float> logits, std::vector<Candidate>& cands, size_t keep) {
  for (size_t i = keep; i < cands.size(); ++i) logits[cands[i].id] = kNegInf;
  cands.resize(keep);
}

// The k-th largest logit (1 <= k < size). A bounded min-heap scan is ~10x faster than a full
// selection when k is small, the usual case; large k use nth_element on a copy.
float kth_largest(std::span<const float> logits, size_t k) {
  std::vector<float> values;
  if (k > kMaxHeapTopK) {
    values.assign(logits.begin(), logits.end());
    const auto kth = values.begin() + static_cast<ptrdiff_t>(k - 1);
    std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
    return *kth;
  }
  values.reserve(k);
  for (float l : logits) {
    if (values.size() < k) {
      values.push_back(l);
      std::push_heap(values.begin(), values.end(), std::greater<float>());
    } else if (l > values.front()) {
      std::pop_heap(values.begin(), values.end(), std::greater<float>());
      values.back() = l;
      std::push_heap(values.begin(), values.end(), std::greater<float>());
    }
  }
  return values.front();
}

// Masks logits below the k-th largest; ties with it stay, as with vLLM's threshold mask.
void apply_top_k(std::span<float> logits, size_t k) {
  if (k == 0 || k >= logits.size()) return;
  const float floor = kth_largest(logits, k);
  for (float& l : logits) {
    if (l < floor) l = kNegInf;
  }
}

const Candidate& median_of_three(const Candidate& a, const Candidate& b, const Candidate& c) {
  if (better(a, b)) return better(b, c) ? b : (better(a, c) ? c : a);
  return better(a, c) ? a : (better(b, c) ? c : b);
}

// Keeps the smallest best-first prefix whose probability reaches top_p (never less than the best
// token). A quickselect on
// probability mass finds where that prefix ends without sorting it: expected O(V). Past a depth
// budget (adversarial pivots) the remaining range is sorted and walked instead.
void apply_top_p(std::span<float> logits, std::vector<Candidate>& cands, float top_p) {
  double total = 0.0;
  for (const Candidate& c : cands) total += c.weight;
  double need = static_cast<double>(top_p) * total;  // mass still missing from the nucleus
  auto lo = cands.begin();
  auto hi = cands.end();
  auto keep_end = cands.end();
  int budget = 2 * std::bit_width(cands.size());
  while (lo != hi) {
    if (budget-- == 0) {
      std::sort(lo, hi, better);
      keep_end = hi;
      for (auto it = lo; it != hi; ++it) {
        need -= it->weight;
        if (need <= 0.0) {
          keep_end = it + 1;
          break;
        }
      }
      break;
    }
    const Candidate pivot = median_of_three(*lo, lo[(hi - lo) / 2], hi[-1]);
    const auto mid = std::partition(lo, hi, [&](const Candidate& c) { return better(c, pivot); });
    std::iter_swap(mid,
                   std::find_if(mid, hi, [&](const Candidate& c) { return c.id == pivot.id; }));
    double better_mass = 0.0;
    for (auto it = lo; it != mid; ++it) better_mass += it->weight;
    if (mid != lo && better_mass >= need) {
      hi = mid;
      keep_end = mid;  // only reached again if rounding leaves `need` unmet below
      continue;
    }
    need -= better_mass + pivot.weight;
    if (need <= 0.0) {
      keep_end = mid + 1;
      break;
    }
    lo = mid + 1;
  }
  drop(logits, cands, static_cast<size_t>(keep_end - cands.begin()));
}

// w[i] = exp(logits[i] - max) (0 for -inf), eight lanes at a time, and the sum of each group of
// eight in sums[i / 8]. The vocabulary-wide exp is most of a draw's cost.
void exp_weights(std::span<const float> logits, float max, float* w, float* sums) {
  const size_t n = logits.size();
  const __m256 mx = _mm256_set1_ps(max);
  for (size_t i = 0; i < n; i += 8) {
    __m256 l;
    if (i + 8 <= n) {
      l = _mm256_loadu_ps(logits.data() + i);
    } else {
      alignas(32) float tail[8];
      std::fill(std::begin(tail), std::end(tail), kNegInf);
      std::copy(logits.begin() + ptrdiff_t(i), logits.end(), tail);
      l = _mm256_load_ps(tail);
    }
    const __m256 e = simd::exp8(_mm256_sub_ps(l, mx));
    _mm256_storeu_ps(w + i, e);
    sums[i / 8] = simd::hsum8(e);
  }
}

// logits[i] = logits[i] / temperature (NaN becomes -inf); returns the largest result. Eight
// lanes at a time: over a large vocabulary these two passes cost more than the draw.
float scale_logits(std::span<float> logits, float temperature) {
  const size_t n = logits.size();
  const __m256 t = _mm256_set1_ps(temperature), ninf = _mm256_set1_ps(kNegInf);
  __m256 mx = ninf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 l = _mm256_loadu_ps(logits.data() + i);
    const __m256 s = _mm256_blendv_ps(_mm256_div_ps(l, t), ninf, _mm256_cmp_ps(l, l, _CMP_UNORD_Q));
    _mm256_storeu_ps(logits.data() + i, s);
    mx = _mm256_max_ps(mx, s);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float max = *std::max_element(std::begin(lanes), std::end(lanes));
  for (; i < n; ++i) {
    logits[i] = std::isnan(logits[i]) ? kNegInf : logits[i] / temperature;
    max = std::max(max, logits[i]);
  }
  return max;
}

// A draw's weights, padded to whole groups of eight, and their group sums: kept by the thread's
// arena, so a draw does not allocate.
struct DrawWeights {
  std::vector<float> weights, group_sums;
};

int32_t sample_random(std::span<float> logits, const SamplingParams& p, SamplerRng& rng,
                      ScratchArena& scratch) {
  const float max = scale_logits(logits, p.temperature);
  if (!(max > kNegInf)) return 0;

  // min-p compares probabilities with the best one: p_i < min_p · p_max ⇔ l_i < max + log(min_p).
  // The best token always stays, whatever min_p says.
  if (p.min_p > 0.0f) {
    const float floor = max + std::min(std::log(p.min_p), 0.0f);
    for (float& l : logits) {
      if (l < floor) l = kNegInf;
    }
  }

  if (p.top_k > 0) apply_top_k(logits, static_cast<size_t>(p.top_k));

  DrawWeights& dw = scratch.get<DrawWeights>();
  std::vector<float>&weights = dw.weights, &group_sums = dw.group_sums;
  const size_t n = logits.size(), groups = (n + 7) / 8;
  weights.resize(groups * 8);
  group_sums.resize(groups);
  exp_weights(logits, max, weights.data(), group_sums.data());

  if (p.top_p < 1.0f) {
    std::vector<Candidate> cands;
    cands.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (logits[i] > kNegInf) cands.push_back({logits[i], static_cast<int32_t>(i), weights[i]});
    }
    apply_top_p(logits, cands, p.top_p);
    double total = 0.0;
    for (const Candidate& c : cands) total += c.weight;
    const double u = rng.next_uniform() * total;
    double cum = 0.0;
    for (const Candidate& c : cands) {
      cum += c.weight;
      if (u < cum) return c.id;
    }
    return cands.back().id;  // u landed past the rounded sum
  }

  // Whole groups are skipped while the draw lies past them; the token is found inside its group.
  double total = 0.0;
  for (float g : group_sums) total += g;
  const double u = rng.next_uniform() * total;
  double cum = 0.0;
  for (size_t g = 0; g < groups; ++g) {
    if (cum + group_sums[g] <= u) {
      cum += group_sums[g];
      continue;
    }
    for (size_t i = g * 8; i < std::min(n, g * 8 + 8); ++i) {
      cum += weights[i];
      if (u < cum) return static_cast<int32_t>(i);
    }
  }
  // u landed past the rounded sum: the last token that can be drawn.
  size_t last = n - 1;
  while (!(logits[last] > kNegInf)) --last;
  return static_cast<int32_t>(last);
}

}  // namespace

TokenLogprobs score_token(std::span<const float> logits, int32_t token, int top_n) {
  TokenLogprobs out;
  out.token = token;
  if (logits.empty() || token < 0 || static_cast<size_t>(token) >= logits.size()) return out;
  const double lse = log_sum_exp(logits);
  const float x = logits[static_cast<size_t>(token)];
  out.logprob = static_cast<float>(static_cast<double>(x) - lse);
  out.rank = 1;
  for (float l : logits) out.rank += l > x ? 1 : 0;
  if (top_n > 0)
    out.top = top_logprobs(logits, std::min(static_cast<size_t>(top_n), logits.size()), lse);
  return out;
}

TokenLogprobs sample(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                     SamplerRng& rng, ScratchArena* scratch) {
  TokenLogprobs result;
  if (logits.empty()) return result;

  // Logprobs come from the logits as the model produced them (vLLM's "raw_logprobs").
  std::vector<float> raw;
  double lse = 0.0;
  if (p.logprobs >= 0) {
    raw.assign(logits.begin(), logits.end());
    lse = log_sum_exp(raw);
    result.top = top_logprobs(raw, std::min(static_cast<size_t>(p.logprobs), raw.size()), lse);
  }

  apply_penalties(logits, p, prompt_tokens, output_tokens);
  ScratchArena own;
  result.token = p.temperature < kGreedyEpsilon
                     ? argmax(logits)
                     : sample_random(logits, p, rng, scratch != nullptr ? *scratch : own);

  if (p.logprobs >= 0) {
    result.logprob = static_cast<float>(static_cast<double>(raw[result.token]) - lse);
  }
  return result;
}

namespace {

bool apply_mask(std::span<const uint64_t> bits, std::span<float> row) {
  bool any = false;
  for (size_t i = 0; i < row.size(); ++i) {
    const size_t word = i / 64;
    if (word >= bits.size() || ((bits[word] >> (i % 64)) & 1u) == 0) row[i] = kNegInf;
    any = any || row[i] > kNegInf;
  }
  return any;
}

bool any_allowed(std::span<const float> row) {
  return std::any_of(row.begin(), row.end(), [](float v) { return v > kNegInf; });
}

}  // namespace

void sample_group(const SampleGroup& g, GroupSamples& out, ScratchArena* scratch) {
  out.tokens.clear();
  out.logprobs.clear();
  out.no_token_allowed = false;
  const size_t vocab = size_t(g.vocab);
  // Row i sees the outputs so far plus the drafts before it.
  std::vector<int32_t> context;
  if (!g.drafts.empty()) context.assign(g.outputs.begin(), g.outputs.end());
  for (size_t i = 0; i <= g.drafts.size(); ++i) {
    const std::span<const int32_t> outputs = g.drafts.empty() ? g.outputs : context;
    const std::span<float> row(g.logits + i * vocab, vocab);
    const size_t words = g.mask_rows > 0 ? g.allowed.size() / g.mask_rows : 0;
    const bool allowed = g.masked && i < g.mask_rows
                             ? apply_mask(g.allowed.subspan(i * words, words), row)
                             : any_allowed(row);
    if (!allowed) {
      // A later row ends the step at the drafts accepted so far; the next step meets the same
      // rules on its first row and reports them.
      out.no_token_allowed = i == 0;
      return;
    }
    TokenLogprobs r = sample(row, *g.params, g.prompt, outputs, *g.rng, scratch);
    out.tokens.push_back(r.token);
    if (g.params->logprobs >= 0) out.logprobs.push_back(std::move(r));
    if (i == g.drafts.size() || out.tokens.back() != g.drafts[i]) return;
    context.push_back(out.tokens.back());
  }
}

}  // namespace kestrel::cpu
