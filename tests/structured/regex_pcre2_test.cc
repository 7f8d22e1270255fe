// compile_regex against PCRE2 as the reference: on random strings (from the pattern's own
// characters and a fixed alphabet, plus matching strings the matcher generates and mutations of
// them) a full match per PCRE2 must equal "all bytes taken and accepting", and every prefix the
// matcher takes must be a viable prefix per PCRE2's hard partial matching (no dead ends), while
// every prefix it refuses must not be.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "generic_test_util.h"
#include "pcre2_oracle.h"
#include "structured/char_class.h"
#include "structured/regex.h"

namespace kestrel::structured {
namespace {

using test::Pcre2;

struct Case {
  const char* ours;
  const char* pcre2;  // nullptr: the same pattern
};

const Case kCases[] = {
    {"abc", nullptr},
    {"a|ab|abc", nullptr},
    {"(ab|ac)d", nullptr},
    {"[a-c]+x", nullptr},
    {"[^a-c]*", nullptr},
    {"a{2,4}", nullptr},
    {"a{3}", nullptr},
    {"a{2,}b", nullptr},
    {"(ab){1,3}c?", nullptr},
    {"x*?y", nullptr},
    {"(a|b)+?c", nullptr},
    {"a??b{2,3}?", nullptr},
    {"(a*)*b", nullptr},
    {"(a?b?)+c", nullptr},
    {"((a|)*|b)*c", nullptr},
    {"é+ü?", nullptr},
    {"[à-ÿ]{2}", nullptr},
    {"[^é]+", nullptr},
    {".+", nullptr},
    {".{1,3}x", nullptr},
    {"\\d{3}-\\d{2,4}", nullptr},
    {"\\w+@\\w+\\.(com|org)", nullptr},
    {"\\s*\\S+\\s*", nullptr},
    {"[\\d\\s]+", nullptr},
    {"\\D\\W", nullptr},
    {"(?:foo|foobar|fob)+", nullptr},
    {"(?P<year>\\d{4})-(?<m>\\d\\d)", nullptr},
    {"^a+$", nullptr},
    {"(a|b|c)*abc", nullptr},
    {"[-a]+[a-]", nullptr},
    {"[]a]+", nullptr},
    {"\\x41\\u00e9\\u{1F600}", "\\x41\\x{e9}\\x{1F600}"},
    {"😀|😁+", nullptr},
    {"(x|y){0,3}z{0,2}", nullptr},
    {"", nullptr},
    {"a{,2}b", "a{0,2}b"},
    {"(ab|a)(bc|c)", nullptr},
    {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$", nullptr},
    {"\\t\\n\\r\\f\\v\\0", "\\t\\n\\r\\f\\x0b\\x00"},
    {"[\\u0100-\\u017F]+", "[\\x{100}-\\x{17F}]+"},
    {"([a-z]+ ){2}[a-z]+", nullptr},
    {"(a|ab)*b", nullptr},
    {"[a-z ]{0,20}", nullptr},
    {"a{0}b", nullptr},
    {"(?#note)ab", nullptr},
    {"a{b|x{1,2", nullptr},
    {"[^\\n]{2}", nullptr},
    {"(\\d+(\\.\\d*)?|\\.\\d+)([eE][-+]?\\d+)?", nullptr},
    {"[^\\x00-\\x7F]+", nullptr},
    {"(a|é|😀){2,5}", nullptr},
};

// Characters mixed into random strings besides the pattern's own. Invalid bytes too: the
// matcher must refuse what is not UTF-8.
std::vector<std::string> alphabet_for(std::string_view pattern) {
  std::vector<std::string> out = {"a",
                                  "b",
                                  "c",
                                  "x",
                                  "y",
                                  "z",
                                  " ",
                                  "\n",
                                  "\t",
                                  "\r",
                                  "\f",
                                  "\v",
                                  "0",
                                  "5",
                                  "9",
                                  "_",
                                  "-",
                                  ".",
                                  "@",
                                  "e",
                                  "E",
                                  "+",
                                  "é",
                                  "ü",
                                  "à",
                                  "ÿ",
                                  "Ā",
                                  "ſ",
                                  "ƀ",
                                  "😀",
                                  "😁",
                                  "中",
                                  "\xFF",
                                  "\xC3",
                                  "\x80",
                                  "\xC0\xAF",
                                  "\xED\xA0\x80",
                                  std::string(1, '\0')};
  for (size_t pos = 0; pos < pattern.size();) {
    const size_t start = pos;
    uint32_t cp = 0;
    if (!decode_utf8(pattern, pos, cp)) pos = start + 1;
    out.emplace_back(pattern.substr(start, pos - start));
  }
  return out;
}

std::string random_string(const std::vector<std::string>& alphabet, std::mt19937& rng) {
  std::string s;
  const int n = std::uniform_int_distribution<int>(0, 12)(rng);
  for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

// A string the matcher generates over the alphabet, ending when it is accepting and a coin says
// so (or nothing can follow).
std::string generated_string(const std::shared_ptr<const Grammar>& g,
                             const std::vector<std::string>& alphabet, std::mt19937& rng) {
  ByteMatcher m(g);
  std::string s;
  for (int step = 0; step < 30; ++step) {
    if (m.accepting() && rng() % 4 == 0) break;
    std::vector<const std::string*> next;
    for (const std::string& a : alphabet) {
      ByteMatcher copy = m;
      if (copy.feed(a)) next.push_back(&a);
    }
    if (next.empty()) break;
    const std::string& pick = *next[rng() % next.size()];
    EXPECT_TRUE(m.feed(pick));
    s += pick;
  }
  return s;
}

std::string mutated(std::string s, const std::vector<std::string>& alphabet, std::mt19937& rng) {
  const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
  switch (rng() % 3) {
    case 0:
      s.insert(at, alphabet[rng() % alphabet.size()]);
      break;
    case 1:
      if (at < s.size()) s.erase(at, 1);
      break;
    default:
      if (at < s.size()) s.replace(at, 1, alphabet[rng() % alphabet.size()]);
      break;
  }
  return s;
}

// Compares one string; returns the number of prefixes checked against PCRE2.
int compare(const std::shared_ptr<const Grammar>& g, const Pcre2& re, const std::string& s,
            const char* pattern) {
  const auto show = [&] {
    return testing::PrintToString(pattern) + " on " + testing::PrintToString(s);
  };
  EXPECT_EQ(test::full_match(g, s), re.full_match(s)) << show();
  ByteMatcher m(g);
  int checked = 0;
  bool refused = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!refused && !m.feed(static_cast<uint8_t>(s[i]))) refused = true;
    const std::string prefix = s.substr(0, i + 1);
    const Pcre2::Prefix p = re.prefix(prefix);
    if (p == Pcre2::Prefix::kTruncated) {
      if (refused) continue;
      // Inside a character the matcher took: some way of finishing it must stay viable.
      ByteMatcher copy = m;
      std::string whole = prefix;
      while (re.prefix(whole) == Pcre2::Prefix::kTruncated) {
        const std::vector<uint8_t> next = test::allowed_bytes(copy);
        if (next.empty()) {
          ADD_FAILURE() << "dead end inside a character: " << show();
          return checked;
        }
        EXPECT_TRUE(copy.feed(next[0]));
        whole += static_cast<char>(next[0]);
      }
      EXPECT_EQ(re.prefix(whole), Pcre2::Prefix::kViable)
          << show() << " completed as " << testing::PrintToString(whole);
      continue;
    }
    ++checked;
    EXPECT_EQ(p == Pcre2::Prefix::kViable, !refused)
        << show() << " prefix " << testing::PrintToString(prefix);
  }
  return checked;
}

TEST(RegexPcre2, AgreesOnRandomStrings) {
  std::mt19937 rng(2024);
  int strings = 0, prefixes = 0;
  for (const Case& c : kCases) {
    auto g = compile_regex(c.ours);
    ASSERT_TRUE(g.ok()) << c.ours << ": " << g.error().message;
    const Pcre2 re(c.pcre2 != nullptr ? c.pcre2 : c.ours);
    ASSERT_TRUE(re.ok()) << c.ours;
    const std::vector<std::string> alphabet = alphabet_for(c.ours);
    for (int i = 0; i < 300; ++i) {
      const std::string generated = generated_string(*g, alphabet, rng);
      for (const std::string& s :
           {random_string(alphabet, rng), generated, mutated(generated, alphabet, rng)}) {
        prefixes += compare(*g, re, s, c.ours);
        ++strings;
        if (HasFailure()) return;
      }
    }
  }
  std::printf("  %d strings, %d prefixes compared with PCRE2\n", strings, prefixes);
}

}  // namespace
}  // namespace kestrel::structured
