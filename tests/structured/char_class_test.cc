// Character-class automata checked exhaustively: every code point is accepted exactly when it
// is in the set, and every byte prefix is refused at the first byte from which no character of
// the set can follow (computed independently from the UTF-8 encoding rules).
#include "structured/char_class.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kestrel::structured {
namespace {

bool contains(const CodeRanges& set, uint32_t lo, uint32_t hi) {
  for (const auto& [a, b] : set) {
    if (a <= hi && b >= lo) return true;
  }
  return false;
}

// The code points whose UTF-8 encodings start with `prefix`, as [lo, hi] (empty: lo > hi).
std::pair<uint32_t, uint32_t> code_points_with_prefix(const std::string& prefix) {
  const auto b0 = static_cast<uint8_t>(prefix[0]);
  int n = 0;
  uint32_t value = 0, min = 0, max = 0;
  if (b0 < 0x80) {
    n = 1, value = b0, min = 0, max = 0x7F;
  } else if (b0 >= 0xC0 && b0 < 0xE0) {
    n = 2, value = b0 & 0x1F, min = 0x80, max = 0x7FF;
  } else if (b0 >= 0xE0 && b0 < 0xF0) {
    n = 3, value = b0 & 0x0F, min = 0x800, max = 0xFFFF;
  } else if (b0 >= 0xF0 && b0 < 0xF8) {
    n = 4, value = b0 & 0x07, min = 0x10000, max = 0x10FFFF;
  } else {
    return {1, 0};
  }
  if (static_cast<int>(prefix.size()) > n) return {1, 0};
  for (size_t i = 1; i < prefix.size(); ++i) {
    const auto b = static_cast<uint8_t>(prefix[i]);
    if ((b & 0xC0) != 0x80) return {1, 0};
    value = value << 6 | (b & 0x3F);
  }
  const int rest = n - static_cast<int>(prefix.size());
  const uint32_t lo = std::max(value << (6 * rest), min);
  const uint32_t hi = std::min(((value + 1) << (6 * rest)) - 1, max);
  return {lo, hi};
}

bool in_set(const CodeRanges& set, uint32_t lo, uint32_t hi) {
  // Surrogates are never characters.
  if (lo > hi) return false;
  CodeRanges clipped = normalize_ranges({{lo, hi}});
  for (const auto& [a, b] : clipped) {
    if (contains(set, a, b)) return true;
  }
  return false;
}

void check_exhaustively(const CodeRanges& raw) {
  const CodeRanges set = normalize_ranges(raw);
  ASSERT_FALSE(set.empty());
  const CharClass cc = compile_char_class(set);
  // Every prefix the automaton keeps, and every byte after it.
  struct Entry {
    std::string prefix;
    int32_t state;
  };
  std::vector<Entry> todo = {{"", 0}};
  int prefixes = 0;
  while (!todo.empty()) {
    const Entry e = todo.back();
    todo.pop_back();
    for (int b = 0; b < 256; ++b) {
      const std::string p = e.prefix + static_cast<char>(b);
      const int32_t to = cc.next[static_cast<size_t>(e.state) * 256 + b];
      const auto [lo, hi] = code_points_with_prefix(p);
      const bool viable = in_set(set, lo, hi);
      ASSERT_EQ(to != kClassReject, viable) << testing::PrintToString(p);
      ++prefixes;
      if (to == kClassDone) {
        ASSERT_EQ(lo, hi) << testing::PrintToString(p);  // a whole character
      } else if (to >= 0) {
        ASSERT_LT(lo, hi);
        todo.push_back({p, to});
      }
    }
  }
  EXPECT_GT(prefixes, 255);
}

TEST(CharClass, AutomatonIsExactOnEveryPrefix) {
  check_exhaustively({{'a', 'z'}});
  check_exhaustively({{0, kMaxCodePoint}});
  check_exhaustively(complement_ranges({{'\n', '\n'}}));
  check_exhaustively({{0x80, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000}, {0x10FFFF, 0x10FFFF}});
  check_exhaustively({{0xD7FF, 0xE000}});  // around the surrogates
  check_exhaustively({{0xE0, 0xFF}, {0x100, 0x17F}, {0x4E00, 0x9FFF}});
  check_exhaustively({{0x1F600, 0x1F64F}});
  check_exhaustively(complement_ranges({{'a', 'c'}, {0xE9, 0xE9}, {0x1F600, 0x1F600}}));
  std::mt19937 rng(3);
  for (int t = 0; t < 20; ++t) {
    CodeRanges set;
    for (int i = 0; i < 6; ++i) {
      const uint32_t lo = rng() % (kMaxCodePoint + 1);
      const uint32_t len = rng() % 3 == 0 ? rng() % 0x10000 : rng() % 64;
      set.emplace_back(lo, std::min(kMaxCodePoint, lo + len));
    }
    if (normalize_ranges(set).empty()) continue;
    check_exhaustively(set);
  }
}

TEST(CharClass, NormalizeAndComplement) {
  EXPECT_EQ(normalize_ranges({{5, 9}, {1, 3}, {4, 4}, {20, 10}}), (CodeRanges{{1, 9}}));
  EXPECT_EQ(normalize_ranges({{0xD000, 0xE000}}), (CodeRanges{{0xD000, 0xD7FF}, {0xE000, 0xE000}}));
  EXPECT_EQ(normalize_ranges({{0xD800, 0xDFFF}}), CodeRanges{});
  EXPECT_EQ(normalize_ranges({{0x10FFF0, 0x7FFFFFFF}}), (CodeRanges{{0x10FFF0, 0x10FFFF}}));
  EXPECT_EQ(complement_ranges({{0, 'a' - 1}, {'b', kMaxCodePoint}}), (CodeRanges{{'a', 'a'}}));
  EXPECT_EQ(complement_ranges({{0, kMaxCodePoint}}), CodeRanges{});
  EXPECT_EQ(complement_ranges({}), (CodeRanges{{0, 0xD7FF}, {0xE000, kMaxCodePoint}}));
}

TEST(CharClass, Utf8RoundTrip) {
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(cp, s);
    size_t pos = 0;
    uint32_t back = 0;
    ASSERT_TRUE(decode_utf8(s, pos, back)) << cp;
    ASSERT_EQ(back, cp);
    ASSERT_EQ(pos, s.size());
  }
  for (const char* bad :
       {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE2\x82", "\xFF"}) {
    size_t pos = 0;
    uint32_t cp = 0;
    EXPECT_FALSE(decode_utf8(bad, pos, cp)) << testing::PrintToString(bad);
  }
}

TEST(CharClass, ReadHex) {
  size_t pos = 0;
  uint32_t v = 0;
  EXPECT_TRUE(read_hex("41zz", pos, 2, 2, v));
  EXPECT_EQ(v, 0x41u);
  EXPECT_EQ(pos, 2u);
  pos = 0;
  EXPECT_TRUE(read_hex("1F600}", pos, 1, 6, v));
  EXPECT_EQ(v, 0x1F600u);
  pos = 0;
  EXPECT_FALSE(read_hex("4", pos, 2, 2, v));
  pos = 0;
  EXPECT_FALSE(read_hex("110000", pos, 1, 6, v));
}

}  // namespace
}  // namespace kestrel::structured
