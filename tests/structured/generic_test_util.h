// Helpers for the tests of the regex, EBNF and choice front ends: feeding text byte by byte,
// and a bounded search proving that a matcher state can still reach a complete text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "structured/byte_matcher.h"

namespace kestrel::structured::test {

// Bytes of `text` the matcher takes before its first refusal.
inline size_t accepted_bytes(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  ByteMatcher m(g);
  size_t i = 0;
  while (i < text.size() && m.feed(static_cast<uint8_t>(text[i]))) ++i;
  return i;
}

inline bool full_match(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  ByteMatcher m(g);
  return m.feed(text) && m.accepting();
}

// The bytes the matcher would take next.
inline std::vector<uint8_t> allowed_bytes(const ByteMatcher& m) {
  std::vector<uint8_t> out;
  for (int c = 0; c < 256; ++c) {
    ByteMatcher copy = m;
    if (copy.feed(static_cast<uint8_t>(c))) out.push_back(static_cast<uint8_t>(c));
  }
  return out;
}

// A state as comparable bytes: every frame of every stack.
inline std::string state_key(const ByteMatcher& m) {
  std::string key;
  for (Stack s : m.stacks()) {
    while (s.depth() > 0) {
      key.append(reinterpret_cast<const char*>(&s.top()), sizeof(Frame));
      s.pop();
    }
    key += '|';
  }
  return key;
}

// The fewest frames any stack of m holds: a completion must pop them all, so the search below
// tries the states closest to the bottom first.
inline int min_depth(const ByteMatcher& m) {
  int d = kMaxDepth + 1;
  for (const Stack& s : m.stacks()) d = std::min(d, s.depth());
  return d;
}

// A completion of m (nullopt when none is found within max_states distinct states): best-first
// by stack depth, then by length.
inline std::optional<std::string> find_completion(const ByteMatcher& m, size_t max_states = 20000) {
  struct Entry {
    int depth;
    std::string suffix;
    ByteMatcher m;
    bool operator<(const Entry& o) const {
      return depth != o.depth ? depth > o.depth : suffix.size() > o.suffix.size();
    }
  };
  std::priority_queue<Entry> todo;
  std::set<std::string> seen = {state_key(m)};
  todo.push({min_depth(m), "", m});
  while (!todo.empty() && seen.size() <= max_states) {
    const Entry e = todo.top();
    todo.pop();
    if (e.m.accepting()) return e.suffix;
    for (int c = 0; c < 256; ++c) {
      ByteMatcher next = e.m;
      if (!next.feed(static_cast<uint8_t>(c))) continue;
      if (!seen.insert(state_key(next)).second) continue;
      const int depth = min_depth(next);
      todo.push({depth, e.suffix + static_cast<char>(c), std::move(next)});
    }
  }
  return std::nullopt;
}

// Every state within `levels` bytes of m (distinct states only) must be completable. Returns
// the number of states checked.
inline int check_all_paths(const ByteMatcher& m, int levels) {
  std::vector<ByteMatcher> frontier = {m};
  std::set<std::string> seen = {state_key(m)};
  int checked = 0;
  for (int level = 0; level <= levels && !frontier.empty(); ++level) {
    std::vector<ByteMatcher> next;
    for (const ByteMatcher& s : frontier) {
      EXPECT_TRUE(find_completion(s).has_value()) << "dead end at level " << level;
      ++checked;
      if (level == levels) continue;
      for (const uint8_t c : allowed_bytes(s)) {
        ByteMatcher t = s;
        t.feed(c);
        if (seen.insert(state_key(t)).second) next.push_back(std::move(t));
      }
    }
    frontier = std::move(next);
  }
  return checked;
}

// Random walks from the start: each step picks one of the allowed bytes (all 256 tried), and
// every state on the way must still be completable. Returns the number of states checked.
inline int check_random_walks(const std::shared_ptr<const Grammar>& g, int walks, int steps,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  int checked = 0;
  for (int w = 0; w < walks; ++w) {
    ByteMatcher m(g);
    std::string text;
    for (int step = 0; step < steps; ++step) {
      const std::optional<std::string> rest = find_completion(m);
      EXPECT_TRUE(rest.has_value()) << "dead end after " << testing::PrintToString(text);
      if (!rest) return checked;
      ++checked;
      const std::vector<uint8_t> bytes = allowed_bytes(m);
      if (bytes.empty()) {
        EXPECT_TRUE(m.accepting()) << testing::PrintToString(text);
        break;
      }
      const uint8_t c = bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng)];
      EXPECT_TRUE(m.feed(c));
      text += static_cast<char>(c);
    }
  }
  return checked;
}

}  // namespace kestrel::structured::test
