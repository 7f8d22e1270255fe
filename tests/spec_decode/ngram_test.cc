// Prompt-lookup drafting (spec_decode/ngram.h): hand cases with exact drafts, and random histories
// against a brute-force reference written straight from the definition.
#include "spec_decode/ngram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace kestrel {
namespace {

using Tokens = std::vector<int32_t>;

// The definition, by brute force: the longest n in [min_n, max_n] such that the history's last
// n tokens also occur starting at some s with s + n <= len - 1 (the occurrence starts before
// the suffix does; it may overlap it); among occurrences of that length the smallest s; the
// drafts are tokens[s + n, min(s + n + k, len)).
Tokens reference(const Tokens& t, int64_t min_n, int64_t max_n, int64_t k) {
  const int64_t len = static_cast<int64_t>(t.size());
  if (k <= 0 || len < 2) return {};
  for (int64_t n = max_n; n >= std::max<int64_t>(min_n, 1); --n) {
    for (int64_t s = 0; s + n <= len - 1; ++s) {
      bool match = true;
      for (int64_t j = 0; j < n && match; ++j) match = t[size_t(s + j)] == t[size_t(len - n + j)];
      if (!match) continue;
      const int64_t from = s + n, to = std::min(s + n + k, len);
      return Tokens(t.begin() + from, t.begin() + to);
    }
  }
  return {};
}

Tokens propose(const Tokens& t, int64_t min_n, int64_t max_n, int64_t k) {
  return ngram_propose(std::span<const int32_t>(t), min_n, max_n, k);
}

std::string show(const Tokens& t) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < t.size(); ++i) os << (i ? " " : "") << t[i];
  os << "}";
  return os.str();
}

TEST(NgramPropose, ReferenceAgreesOnHandCases) {
  // The reference itself, on the hand cases below, so that the random comparison rests on it.
  EXPECT_EQ(reference({1, 2, 3, 4, 9, 9, 1, 2, 3}, 1, 5, 3), (Tokens{4, 9, 9}));
  EXPECT_EQ(reference({7, 7, 7, 7}, 1, 3, 5), (Tokens{7}));
  EXPECT_EQ(reference({7, 7, 7, 7}, 1, 1, 5), (Tokens{7, 7, 7}));
  EXPECT_EQ(reference({2, 3, 7, 1, 2, 3, 8, 1, 2, 3}, 1, 2, 3), (Tokens{7, 1, 2}));
}

TEST(NgramPropose, RepeatedPhrase) {
  // The suffix "1 2 3" occurs at 0; "9 1 2 3" does not recur. Drafts start after it: 4 9 9.
  const Tokens t = {1, 2, 3, 4, 9, 9, 1, 2, 3};
  EXPECT_EQ(propose(t, 1, 5, 3), (Tokens{4, 9, 9}));
  EXPECT_EQ(propose(t, 1, 5, 1), (Tokens{4}));
  EXPECT_EQ(propose(t, 3, 3, 4), (Tokens{4, 9, 9, 1}));
  // Up to the end of the history: s + n = 3, so at most len - 3 = 6 drafts.
  EXPECT_EQ(propose(t, 2, 4, 10), (Tokens{4, 9, 9, 1, 2, 3}));
}

TEST(NgramPropose, EarliestAmongEqualLengthMatches) {
  // "5 6" occurs at 0 (followed by 1) and at 3 (followed by 2); no 3-gram suffix recurs.
  const Tokens t = {5, 6, 1, 5, 6, 2, 5, 6};
  EXPECT_EQ(propose(t, 1, 4, 1), (Tokens{1}));
  EXPECT_EQ(propose(t, 1, 4, 3), (Tokens{1, 5, 6}));
  EXPECT_EQ(propose(t, 2, 2, 2), (Tokens{1, 5}));
  // Length 1: "6" occurs at 1 and 4: the first.
  EXPECT_EQ(propose(t, 1, 1, 2), (Tokens{1, 5}));
}

TEST(NgramPropose, LongerMatchBeatsEarlierShorterOne) {
  // Suffix "1 2 3": "2 3" occurs first at 0 (followed by 7), "1 2 3" at 3 (followed by 8).
  const Tokens t = {2, 3, 7, 1, 2, 3, 8, 1, 2, 3};
  EXPECT_EQ(propose(t, 1, 3, 3), (Tokens{8, 1, 2}));
  EXPECT_EQ(propose(t, 2, 6, 1), (Tokens{8}));
  EXPECT_EQ(propose(t, 3, 6, 4), (Tokens{8, 1, 2, 3}));
}

TEST(NgramPropose, MaxNCapsTheMatchLength) {
  // The same history with max_n = 2: the 3-gram at 3 counts only as the 2-gram "2 3" at 4, and
  // the earlier 2-gram at 0 wins, so the drafts follow it (7) rather than the longer match (8).
  const Tokens t = {2, 3, 7, 1, 2, 3, 8, 1, 2, 3};
  EXPECT_EQ(propose(t, 1, 2, 3), (Tokens{7, 1, 2}));
  EXPECT_EQ(propose(t, 2, 2, 1), (Tokens{7}));
  // max_n = 1: "3" occurs first at 1.
  EXPECT_EQ(propose(t, 1, 1, 2), (Tokens{7, 1}));
}

TEST(NgramPropose, MinNAboveEveryMatchGivesNothing) {
  const Tokens t = {1, 2, 3, 4, 9, 9, 1, 2, 3};
  EXPECT_TRUE(propose(t, 4, 5, 3).empty());
  EXPECT_TRUE(propose(t, 4, 4, 3).empty());
  EXPECT_EQ(propose(t, 3, 5, 3), (Tokens{4, 9, 9}));
  // Nothing recurs at all.
  EXPECT_TRUE(propose({1, 2, 3, 4, 5}, 1, 3, 3).empty());
  // min_n longer than the history.
  EXPECT_TRUE(propose({4, 4, 4}, 4, 6, 3).empty());
}

TEST(NgramPropose, DraftsClippedAtTheEndOfTheHistory) {
  // "7 7 7 7", k = 5: n = 3 matches at s = 0 (tokens 0..2 overlap the suffix 1..3), leaving one
  // token after it; smaller max_n match shorter and leave more.
  const Tokens t = {7, 7, 7, 7};
  EXPECT_EQ(propose(t, 1, 3, 5), (Tokens{7}));
  EXPECT_EQ(propose(t, 1, 6, 5), (Tokens{7}));
  EXPECT_EQ(propose(t, 1, 2, 5), (Tokens{7, 7}));
  EXPECT_EQ(propose(t, 1, 1, 5), (Tokens{7, 7, 7}));
  EXPECT_TRUE(propose(t, 4, 6, 5).empty());  // a 4-gram would have to start before index 0
  // An overlapping period-2 run: suffix "1 2 1 2" (n = 4) at s = 0, drafts tokens[4..6).
  EXPECT_EQ(propose({1, 2, 1, 2, 1, 2}, 1, 6, 5), (Tokens{1, 2}));
  EXPECT_EQ(propose({5, 5}, 1, 3, 4), (Tokens{5}));
}

TEST(NgramPropose, NonPositiveKOrShortHistoryGivesNothing) {
  const Tokens t = {1, 2, 3, 4, 9, 9, 1, 2, 3};
  EXPECT_TRUE(propose(t, 1, 5, 0).empty());
  EXPECT_TRUE(propose(t, 1, 5, -2).empty());
  EXPECT_TRUE(propose({}, 1, 5, 3).empty());
  EXPECT_TRUE(propose({3}, 1, 5, 3).empty());
}

void compare_random(uint32_t seed, int cases, int max_len, bool long_max_n) {
  std::mt19937 gen(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  int matched = 0;
  for (int c = 0; c < cases; ++c) {
    const int alphabet = uniform(2, 5), len = uniform(0, max_len);
    Tokens t(static_cast<size_t>(len));
    for (int32_t& x : t) x = uniform(0, alphabet - 1);
    const int64_t min_n = uniform(1, 4);
    const int64_t max_n =
        long_max_n ? uniform(int(min_n), std::max(int(min_n), len + 3)) : uniform(int(min_n), 6);
    const int64_t k = uniform(0, 6);
    const Tokens want = reference(t, min_n, max_n, k);
    matched += !want.empty();
    ASSERT_EQ(propose(t, min_n, max_n, k), want)
        << "seed " << seed << " case " << c << ": tokens " << show(t) << " min_n " << min_n
        << " max_n " << max_n << " k " << k;
  }
  // The small alphabets make matches common: many cases (k = 0 and short histories aside)
  // exercise a real proposal.
  EXPECT_GT(matched, cases / 3) << "seed " << seed;
}

TEST(NgramPropose, MatchesBruteForceOnRandomHistories) {
  for (uint32_t seed : {1u, 2u, 3u}) compare_random(seed, 2000, 60, false);
}

TEST(NgramPropose, MatchesBruteForceWithMaxNUpToTheLength) {
  for (uint32_t seed : {11u, 12u}) compare_random(seed, 1000, 40, true);
}

}  // namespace
}  // namespace kestrel
