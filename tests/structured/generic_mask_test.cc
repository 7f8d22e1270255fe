// Token masks for regex and choice grammars over a small hand-made vocabulary: at every step of
// random walks the mask must allow exactly the tokens after which a match is still possible
// (per PCRE2, or per the list of choices), EOS exactly when the text is complete.
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "generic_test_util.h"
#include "pcre2_oracle.h"
#include "structured/choice.h"
#include "structured/matcher.h"
#include "structured/regex.h"

namespace kestrel::structured {
namespace {

using test::Pcre2;

std::shared_ptr<const TokenTrie> tiny_trie(int32_t& eos) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"ab",    "abc", "yes",      "ye",       "s",  "no",       "maybe",  "may",
                        "be",    "12",  "123",      "-",        "--", "-1",       "é",      "\xC3",
                        "\xA9x", "😀",   "\xF0\x9F", "\x98\x80", " a", "a b",      "yes no", "12-ab",
                        "bc",    "cd",  "xyz",      "maybe!",   "n",  "\xE4\xB8", "中"}) {
    tokens.emplace_back(t);
  }
  tokens.emplace_back("<eos>");
  eos = static_cast<int32_t>(tokens.size() - 1);
  return TokenTrie::build(std::move(tokens), {eos});
}

bool has_bit(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[id / 64] >> (id % 64)) & 1;
}

// What may follow `text`: an oracle for one grammar.
struct Oracle {
  std::function<bool(const std::string&)> complete;
  std::function<bool(const std::string&)> viable;  // text is the start of a complete text
};

// Walks picking allowed tokens; every mask is compared, token by token, with the oracle.
// Returns the number of masks compared.
int check_masks(const std::shared_ptr<const Grammar>& g, const Oracle& oracle, int walks,
                uint32_t seed) {
  int32_t eos = 0;
  const auto trie = tiny_trie(eos);
  std::mt19937 rng(seed);
  std::vector<uint64_t> bits;
  int masks = 0;
  for (int w = 0; w < walks; ++w) {
    Matcher m(g, trie);
    std::string text;
    for (int step = 0; step < 12; ++step) {
      m.fill_mask(bits);
      ++masks;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie->vocab_size(); ++id) {
        const bool want =
            id == eos ? oracle.complete(text) : oracle.viable(text + std::string(trie->bytes(id)));
        if (has_bit(bits, id) != want) {
          ADD_FAILURE() << "after " << testing::PrintToString(text) << ", token "
                        << testing::PrintToString(std::string(trie->bytes(id)))
                        << (want ? " is missing" : " is allowed wrongly");
          return masks;
        }
        if (want) allowed.push_back(id);
      }
      if (allowed.empty()) {
        ADD_FAILURE() << "dead end after " << testing::PrintToString(text);
        return masks;
      }
      const int32_t id = step > 6 && has_bit(bits, eos) ? eos : allowed[rng() % allowed.size()];
      EXPECT_TRUE(m.accept(id));
      if (id == eos) {
        EXPECT_TRUE(m.done());
        break;
      }
      text += trie->bytes(id);
    }
  }
  return masks;
}

// PCRE2 decides whole characters; inside one, the byte matcher (whose character automata are
// checked exhaustively in char_class_test) decides.
Oracle regex_oracle(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<Pcre2>& re) {
  Oracle o;
  o.complete = [re](const std::string& s) { return re->full_match(s); };
  o.viable = [re, g](const std::string& s) {
    const Pcre2::Prefix p = re->prefix(s);
    if (p != Pcre2::Prefix::kTruncated) return p == Pcre2::Prefix::kViable;
    ByteMatcher m(g);
    return m.feed(s);
  };
  return o;
}

TEST(GenericMask, RegexMasksMatchPcre2) {
  for (const char* pattern : {"\\d{1,3}-[a-z]{2,4}", "(yes|no|maybe)( [a-z]+)?", "(ab|abc)+d?",
                              "[^\\x00-\\x7F]{1,2}x?", "(ab)*", "a?b?c?"}) {
    auto g = compile_regex(pattern);
    ASSERT_TRUE(g.ok()) << g.error().message;
    EXPECT_GT(check_masks(*g, regex_oracle(*g, std::make_shared<Pcre2>(pattern)), 20, 17), 30)
        << pattern;
  }
}

TEST(GenericMask, NullableRootAllowsEosAtOnce) {
  int32_t eos = 0;
  const auto trie = tiny_trie(eos);
  std::vector<uint64_t> bits;
  for (const char* pattern : {"(ab)*", "", "x?"}) {
    Matcher m(*compile_regex(pattern), trie);
    m.fill_mask(bits);
    EXPECT_TRUE(has_bit(bits, eos)) << pattern;
    EXPECT_TRUE(m.accepting());
  }
  Matcher empty(*compile_regex(""), trie);
  empty.fill_mask(bits);
  EXPECT_TRUE(empty.done());
  for (int32_t id = 0; id < trie->vocab_size(); ++id) EXPECT_EQ(has_bit(bits, id), id == eos);
  Matcher needs(*compile_regex("ab"), trie);
  needs.fill_mask(bits);
  EXPECT_FALSE(has_bit(bits, eos));
}

TEST(GenericMask, ChoiceMasks) {
  const std::vector<std::string> choices = {"yes", "no", "maybe", "maybe!", "中文", "y"};
  auto g = choice_grammar(choices);
  ASSERT_TRUE(g.ok());
  Oracle o;
  o.complete = [&](const std::string& s) {
    return std::find(choices.begin(), choices.end(), s) != choices.end();
  };
  o.viable = [&](const std::string& s) {
    for (const std::string& c : choices) {
      if (c.compare(0, s.size(), s) == 0) return true;
    }
    return false;
  };
  EXPECT_GT(check_masks(*g, o, 30, 5), 60);
  // Raw text, not JSON strings; and "maybe" may end or go on to "maybe!".
  EXPECT_FALSE(test::full_match(*g, "\"yes\""));
  ByteMatcher m(*g);
  ASSERT_TRUE(m.feed("maybe"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.done());
  ASSERT_TRUE(m.feed('!'));
  EXPECT_TRUE(m.done());
}

// Thousands of choices over a vocabulary of every string up to four letters: one walk meets
// more states than the matcher's cache holds, so it falls back to walking without it, and
// later masks start from a trimmed cache. Every mask must still equal brute force.
TEST(GenericMask, MasksStayExactWhenTheStateCacheOverflows) {
  std::vector<std::string> tokens;
  std::vector<std::string> level = {""};
  for (int len = 1; len <= 4; ++len) {
    std::vector<std::string> longer;
    for (const std::string& t : level) {
      for (const char c : std::string("abcdefgh")) longer.push_back(t + c);
    }
    tokens.insert(tokens.end(), longer.begin(), longer.end());
    level = std::move(longer);
  }
  tokens.emplace_back("<eos>");
  const auto eos = static_cast<int32_t>(tokens.size() - 1);
  const auto trie = TokenTrie::build(tokens, {eos});
  std::mt19937 rng(9);
  std::vector<std::string> choices;
  for (int i = 0; i < 3000; ++i) {
    std::string c;
    for (int k = 0; k < 7; ++k) c += static_cast<char>('a' + rng() % 8);
    choices.push_back(c);
  }
  auto g = choice_grammar(choices);
  ASSERT_TRUE(g.ok());
  std::vector<uint64_t> bits;
  for (int walk = 0; walk < 3; ++walk) {
    Matcher m(*g, trie);
    const std::string& target = choices[rng() % choices.size()];
    for (size_t at = 0;;) {
      m.fill_mask(bits);
      for (int32_t id = 0; id < trie->vocab_size(); ++id) {
        ByteMatcher copy = m.byte_matcher();
        const bool want = id == eos ? copy.accepting() : copy.feed(trie->bytes(id));
        ASSERT_EQ(has_bit(bits, id), want) << target << " at " << at << " token " << tokens[id];
      }
      if (at == target.size()) break;
      const size_t n = std::min<size_t>(1 + rng() % 4, target.size() - at);
      const auto id = static_cast<int32_t>(
          std::find(tokens.begin(), tokens.end(), target.substr(at, n)) - tokens.begin());
      ASSERT_TRUE(m.accept(id));
      at += n;
    }
    EXPECT_TRUE(m.accept(eos));
  }
}

TEST(GenericMask, ChoiceErrors) {
  EXPECT_NE(choice_grammar({}).error().message.find("empty"), std::string::npos);
  EXPECT_NE(choice_grammar({"a", ""}).error().message.find("choice 1 is an empty string"),
            std::string::npos);
  EXPECT_NE(choice_grammar({"\xFF"}).error().message.find("UTF-8"), std::string::npos);
  EXPECT_TRUE(choice_grammar({"same", "same"}).ok());
}

}  // namespace
}  // namespace kestrel::structured
