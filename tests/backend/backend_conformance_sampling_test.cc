// Backend conformance (backend_conformance_test.cc) of the sampling ops: sample and score_tokens
// on every ISA and on 1 and 2 threads, against float64 references — greedy rows are the float64
// argmax, seeded rows the float64 inverse CDF at the request's uniform draw and reproducible bit
// for bit across ISAs and thread counts, masked rows never pick a masked token, scores are the
// float64 log-softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend_conformance.h"

namespace kestrel::conformance {
namespace {

class BackendConformanceSampling : public ConformanceTest {};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kVocab = 1037;

// Float64 log-sum-exp over the finite logits, and the ids best first (logit descending, ties to
// the lower id; NaN left out).
struct RowRef {
  double lse;
  std::vector<int32_t> order;
};

RowRef row_ref(const float* l, int64_t v) {
  double mx = -kInf, sum = 0;
  RowRef r;
  for (int64_t i = 0; i < v; ++i) {
    if (!std::isnan(l[i])) r.order.push_back(int32_t(i));
    if (l[i] > mx) mx = l[i];
  }
  for (int64_t i = 0; i < v; ++i)
    if (l[i] > -kInf) sum += std::exp(double(l[i]) - mx);
  r.lse = mx + std::log(sum);
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return r;
}

::testing::AssertionResult same(const TokenLogprobs& a, const TokenLogprobs& b) {
  bool eq = a.token == b.token && a.rank == b.rank && a.top.size() == b.top.size() &&
            std::bit_cast<uint32_t>(a.logprob) == std::bit_cast<uint32_t>(b.logprob);
  for (size_t i = 0; eq && i < a.top.size(); ++i)
    eq = a.top[i].token == b.top[i].token &&
         std::bit_cast<uint32_t>(a.top[i].logprob) == std::bit_cast<uint32_t>(b.top[i].logprob);
  if (eq) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "token " << a.token << " vs " << b.token << ", logprob "
                                       << a.logprob << " vs " << b.logprob;
}

// A logprob within two f32 roundings of the float64 one.
void expect_logprob(float got, double want, const std::string& what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, float(want)) << what;
    return;
  }
  EXPECT_NEAR(got, want, 2 * kU * std::fabs(want) + 1e-12) << what;
}

void expect_top(const std::vector<TokenLogprob>& top, const float* l, const RowRef& ref, size_t n,
                const std::string& what) {
  ASSERT_EQ(top.size(), n) << what;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(top[i].token, ref.order[i]) << what << " top " << i;
    expect_logprob(top[i].logprob, double(l[ref.order[i]]) - ref.lse, what);
  }
}

TEST_F(BackendConformanceSampling, ScoreTokens) {
  std::mt19937 rng(11);
  const int64_t rows = 9;
  std::vector<float> logits = randn(size_t(rows * kVocab), rng, 0.0f, 3.0f);
  std::vector<int32_t> tokens;
  for (int64_t r = 0; r < rows; ++r) tokens.push_back(int32_t(rng() % kVocab));
  float* l1 = logits.data() + kVocab;  // row 1: the best logit twice (ties to the lower id)
  l1[5] = l1[700] = 20.0f;
  tokens[1] = 700;
  float* l2 = logits.data() + 2 * kVocab;  // row 2: masked entries, the token among them
  for (int64_t i = 0; i < kVocab; i += 3) l2[i] = -kInf;
  tokens[2] = 300;
  float* l3 = logits.data() + 3 * kVocab;  // row 3: NaNs are never counted or listed
  for (int64_t i = 1; i < kVocab; i += 50) l3[i] = std::numeric_limits<float>::quiet_NaN();
  tokens[4] = int32_t(kVocab - 1);
  for (const int top_n : {5, 0}) {
    for_each_isa([&](const std::string&) {
      std::vector<TokenLogprobs> s1(static_cast<size_t>(rows)), s2 = s1;
      one->score_tokens(logits.data(), rows, kVocab, tokens.data(), top_n, s1.data());
      two->score_tokens(logits.data(), rows, kVocab, tokens.data(), top_n, s2.data());
      for (int64_t r = 0; r < rows; ++r) {
        const std::string what = "row " + std::to_string(r) + " top_n " + std::to_string(top_n);
        EXPECT_TRUE(same(s1[r], s2[r])) << what;
        const float* l = logits.data() + r * kVocab;
        const RowRef ref = row_ref(l, kVocab);
        const float x = l[tokens[r]];
        EXPECT_EQ(s2[r].token, tokens[r]) << what;
        expect_logprob(s2[r].logprob, double(x) - ref.lse, what);
        EXPECT_EQ(s2[r].rank, 1 + std::count_if(l, l + kVocab, [&](float v) { return v > x; }))
            << what;
        expect_top(s2[r].top, l, ref, size_t(top_n), what);
      }
      EXPECT_EQ(s2[1].rank, 1);  // ties share a rank
      EXPECT_EQ(s2[2].logprob, -kInf);
    });
  }
}

// One request of the sampling step.
struct Request {
  SamplingParams params;
  std::vector<float> logits;  // (drafts + 1) rows
  std::vector<int32_t> drafts, prompt, outputs;
  bool masked = false;
  std::vector<uint64_t> allowed;
  uint64_t seed = 0;
};

bool allowed(const Request& q, int32_t id) {
  return !q.masked ||
         (size_t(id / 64) < q.allowed.size() && ((q.allowed[size_t(id / 64)] >> (id % 64)) & 1));
}

// The first row as the sampler sees it: masked tokens at -inf.
std::vector<float> masked_row(const Request& q) {
  std::vector<float> row(q.logits.begin(), q.logits.begin() + kVocab);
  for (int32_t i = 0; i < int32_t(kVocab); ++i)
    if (!allowed(q, i)) row[i] = -kInf;
  return row;
}

int32_t argmax(const std::vector<double>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());  // the first of equals
}

// The float64 draw: the token whose interval of the cumulative distribution (ids ascending;
// temperature, then top-k by threshold) holds u·total, with u the request's first uniform. Sets
// `near` when u·total lies within 1e-5 of the total from an interval's end (the kernel's f32
// weights may then fall either way).
int32_t inverse_cdf(const Request& q, const std::vector<float>& row, bool& near) {
  const SamplingParams& p = q.params;
  std::vector<float> sorted(row);
  std::sort(sorted.rbegin(), sorted.rend());
  const float floor = p.top_k > 0 ? sorted[size_t(p.top_k) - 1] : -kInf;
  std::vector<double> w(row.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] > -kInf && row[i] >= floor)
      total += w[i] = std::exp((double(row[i]) - sorted[0]) / p.temperature);
  SamplerRng r{q.seed, 0};
  const double u = r.next_uniform() * total;
  double cum = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (w[i] == 0) continue;
    near = near || std::fabs(u - cum) < 1e-5 * total || std::fabs(u - cum - w[i]) < 1e-5 * total;
    if (u < (cum += w[i])) return int32_t(i);
  }
  return -1;
}

std::vector<Request> make_requests(std::mt19937& rng) {
  std::vector<Request> rs;
  rs.reserve(28);  // add() hands out pointers into rs
  auto add = [&](SamplingParams p, int rows = 1) {
    Request q;
    q.params = p;
    q.logits = randn(size_t(rows * kVocab), rng, 0.0f, 2.0f);
    q.seed = rng();
    rs.push_back(q);
    return &rs.back();
  };
  auto random_mask = [&](Request* q, double keep, size_t words) {
    q->masked = true;
    std::bernoulli_distribution b(keep);
    q->allowed.assign(words, 0);
    for (size_t i = 0; i < words * 64; ++i) q->allowed[i / 64] |= uint64_t(b(rng)) << (i % 64);
  };
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 3;
  add(greedy);                 // 0: greedy with logprobs
  Request* tie = add(greedy);  // 1: tied best: the lower id
  tie->logits[5] = tie->logits[700] = 20.0f;
  random_mask(add(greedy), 0.3, 17);  // 2: greedy, masked
  Request* short_mask = add(greedy);  // 3: ids past the words are disallowed
  random_mask(short_mask, 0.5, 8);
  short_mask->logits[900] = 50.0f;
  SamplingParams pen = greedy;  // 4: penalties (vLLM/OpenAI semantics)
  pen.repetition_penalty = 1.5f;
  pen.presence_penalty = 0.5f;
  pen.frequency_penalty = 0.25f;
  Request* pq = add(pen);
  const int32_t best =
      int32_t(std::max_element(pq->logits.begin(), pq->logits.end()) - pq->logits.begin());
  pq->prompt = {best, 3, 3, 10};
  pq->outputs = {best, 11, 11, 12, 12, 12};
  SamplingParams greedy_nolp = greedy;
  greedy_nolp.logprobs = -1;
  Request* dq = add(greedy_nolp, 4);  // 5: drafts 0 and 1 accepted, draft 2 rejected
  for (int r = 0; r < 3; ++r) {
    const auto row = dq->logits.begin() + r * kVocab;
    const int32_t a = int32_t(std::max_element(row, row + kVocab) - row);
    dq->drafts.push_back(r < 2 ? a : (a + 1) % int32_t(kVocab));
  }
  SamplingParams temp;
  temp.temperature = 0.8f;
  for (int i = 0; i < 8; ++i) add(temp);  // 6..13: pure temperature
  SamplingParams topk;
  topk.temperature = 1.3f;
  topk.top_k = 20;
  topk.logprobs = 1;
  for (int i = 0; i < 8; ++i) random_mask(add(topk), 0.5, 17);  // 14..21: masked top-k
  SamplingParams nucleus;
  nucleus.top_p = 0.9f;
  nucleus.min_p = 0.05f;
  for (int i = 0; i < 4; ++i) add(nucleus)->logits[i * 7] = 6.0f;  // 22..25: top-p and min-p
  random_mask(add(temp), 0.0, 17);                                 // 26: nothing allowed
  Request* sd = add(temp, 3);  // 27: a drawn draft accepted, the next rejected
  sd->logits[17] = 60.0f;
  sd->logits[kVocab + 40] = 60.0f;
  sd->drafts = {17, 41};
  return rs;
}

struct SampleRun {
  std::vector<GroupSamples> out;
  std::vector<uint64_t> draws;
};

SampleRun run(Backend& b, const std::vector<Request>& rs) {
  std::vector<std::vector<float>> logits;
  std::vector<SamplerRng> rngs;
  std::vector<SampleGroup> groups;
  for (const Request& q : rs) {
    logits.push_back(q.logits);
    rngs.push_back(SamplerRng{q.seed, 0});
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    SampleGroup g;
    g.logits = logits[i].data();
    g.vocab = kVocab;
    g.drafts = rs[i].drafts;
    g.params = &rs[i].params;
    g.prompt = rs[i].prompt;
    g.outputs = rs[i].outputs;
    g.masked = rs[i].masked;
    g.allowed = rs[i].allowed;
    g.rng = &rngs[i];
    groups.push_back(g);
  }
  SampleRun r;
  r.out.resize(rs.size());
  b.sample(groups, r.out);
  for (const SamplerRng& g : rngs) r.draws.push_back(g.draws);
  return r;
}

void check_against_reference(const std::vector<Request>& rs, const SampleRun& r, int& near_misses) {
  for (size_t i = 0; i < rs.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "request " << i);
    const Request& q = rs[i];
    const GroupSamples& s = r.out[i];
    const std::vector<float> row = masked_row(q);
    if (i == 26) {
      EXPECT_TRUE(s.no_token_allowed);
      EXPECT_TRUE(s.tokens.empty());
      EXPECT_EQ(r.draws[i], 0u);
      continue;
    }
    ASSERT_FALSE(s.tokens.empty());
    EXPECT_FALSE(s.no_token_allowed);
    EXPECT_TRUE(allowed(q, s.tokens[0])) << "picked masked token " << s.tokens[0];
    const bool greedy = q.params.temperature == 0.0f;
    EXPECT_EQ(r.draws[i], greedy ? 0u : s.tokens.size());
    if (i == 5) {
      std::vector<int32_t> want;
      for (int k = 0; k < 3; ++k) {
        const auto rr = q.logits.begin() + k * kVocab;
        want.push_back(int32_t(std::max_element(rr, rr + kVocab) - rr));
      }
      EXPECT_EQ(s.tokens, want) << "two drafts accepted, then the argmax of row 2";
    } else if (i == 27) {
      EXPECT_EQ(s.tokens, (std::vector<int32_t>{17, 40}));
    } else if (i == 4) {
      // Repetition penalty once per token of prompt and outputs; frequency per occurrence and
      // presence once per token of the outputs.
      std::vector<double> pen(row.begin(), row.end());
      std::vector<int32_t> seen(q.prompt);
      seen.insert(seen.end(), q.outputs.begin(), q.outputs.end());
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      for (int32_t t : seen) pen[t] = row[t] > 0 ? row[t] / 1.5 : row[t] * 1.5;
      for (int32_t t : q.outputs) pen[t] -= 0.25;
      std::vector<int32_t> present(q.outputs);
      std::sort(present.begin(), present.end());
      present.erase(std::unique(present.begin(), present.end()), present.end());
      for (int32_t t : present) pen[t] -= 0.5;
      const double mx = *std::max_element(pen.begin(), pen.end());
      EXPECT_GE(pen[s.tokens[0]], mx - 1e-5) << "penalized argmax " << argmax(pen);
      EXPECT_NE(s.tokens[0], q.prompt[0]) << "the penalties should move the argmax";
    } else if (greedy) {
      EXPECT_EQ(s.tokens[0], argmax(std::vector<double>(row.begin(), row.end())));
    } else if (q.params.top_p < 1.0f) {
      // Validity: kept by min-p, and in the nucleus (the mass of better kept tokens < top_p).
      const double mx = *std::max_element(row.begin(), row.end());
      double kept = 0, better = 0;
      const int32_t t = s.tokens[0];
      for (int64_t v = 0; v < kVocab; ++v) {
        const double w = std::exp(row[v] - mx);
        if (w < q.params.min_p) continue;
        kept += w;
        if (row[v] > row[t] || (row[v] == row[t] && v < t)) better += w;
      }
      EXPECT_GE(std::exp(row[t] - mx), q.params.min_p * (1 - 1e-5));
      EXPECT_LT(better, q.params.top_p * kept * (1 + 1e-5));
    } else {
      bool near = false;
      const int32_t want = inverse_cdf(q, row, near);
      near_misses += near;
      if (!near) {
        EXPECT_EQ(s.tokens[0], want) << "float64 inverse CDF";
      }
    }
    if (q.params.logprobs >= 0) {
      ASSERT_EQ(s.logprobs.size(), s.tokens.size());
      const RowRef ref = row_ref(row.data(), kVocab);
      EXPECT_EQ(s.logprobs[0].token, s.tokens[0]);
      expect_logprob(s.logprobs[0].logprob, double(row[s.tokens[0]]) - ref.lse, "logprob");
      expect_top(s.logprobs[0].top, row.data(), ref, size_t(q.params.logprobs), "top");
    } else {
      EXPECT_TRUE(s.logprobs.empty());
    }
  }
}

TEST_F(BackendConformanceSampling, Sample) {
  std::mt19937 rng(12);
  const std::vector<Request> rs = make_requests(rng);
  ASSERT_EQ(rs.size(), 28u);
  std::vector<SampleRun> runs;
  int near_misses = 0;
  for_each_isa([&](const std::string&) {
    for (Backend* b : {one.get(), two.get()}) {
      runs.push_back(run(*b, rs));
      check_against_reference(rs, runs.back(), near_misses);
      // Reproducible: the same tokens, logprobs and draws on every ISA and thread count.
      for (size_t i = 0; i < rs.size(); ++i) {
        EXPECT_EQ(runs.back().out[i].tokens, runs[0].out[i].tokens) << "request " << i;
        EXPECT_EQ(runs.back().draws[i], runs[0].draws[i]) << "request " << i;
        ASSERT_EQ(runs.back().out[i].logprobs.size(), runs[0].out[i].logprobs.size());
        for (size_t j = 0; j < runs[0].out[i].logprobs.size(); ++j)
          EXPECT_TRUE(same(runs.back().out[i].logprobs[j], runs[0].out[i].logprobs[j]));
      }
    }
  });
  // Sixteen seeded draws per run are checked against the inverse CDF; near misses skip one.
  EXPECT_LE(near_misses, int(runs.size()));
  // The masked top-k requests would pick masked tokens half the time without their masks.
  int unmasked_would_differ = 0;
  for (size_t i = 14; i < 22; ++i) {
    Request open = rs[i];
    open.masked = false;
    bool near = false;
    unmasked_would_differ += !allowed(rs[i], inverse_cdf(open, masked_row(open), near));
  }
  EXPECT_GE(unmasked_would_differ, 1);
}

}  // namespace
}  // namespace kestrel::conformance
