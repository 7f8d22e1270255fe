// compile_regex: what it refuses (each construct named in the message), and behaviour PCRE2
// cannot judge: the exact byte where a partial UTF-8 character is refused, nesting limits, and
// random walks that must never reach a dead end.
#include "structured/regex.h"

#include <string>

#include <gtest/gtest.h>

#include "generic_test_util.h"

namespace kestrel::structured {
namespace {

using test::accepted_bytes;
using test::full_match;

std::shared_ptr<const Grammar> compile(std::string_view pattern) {
  auto g = compile_regex(pattern);
  EXPECT_TRUE(g.ok()) << pattern << ": " << (g.ok() ? "" : g.error().message);
  return g.ok() ? *g : nullptr;
}

std::string error_of(std::string_view pattern) {
  auto g = compile_regex(pattern);
  return g.ok() ? "<compiled>" : g.error().message;
}

TEST(Regex, RefusesWhatItCannotEnforce) {
  const std::pair<std::string, const char*> cases[] = {
      {"(a)\\1", "backreferences (\\1)"},
      {"(?P<x>a)(?P=x)", "backreferences ((?P=name))"},
      {"\\k<x>", "backreferences (\\k)"},
      {"a(?=b)", "lookahead"},
      {"a(?!b)", "lookahead"},
      {"(?<=a)b", "lookbehind"},
      {"(?<!a)b", "lookbehind"},
      {"\\bword\\b", "word boundaries (\\b)"},
      {"a\\Bb", "word boundaries (\\B)"},
      {"a^b", "'^' is only supported at the start"},
      {"a$b", "'$' is only supported at the end"},
      {"(a$)", "'$' is only supported at the end"},
      {"\\Aabc", "anchor \\A"},
      {"abc\\Z", "anchor \\Z"},
      {"abc\\z", "anchor \\z"},
      {"(?i)abc", "inline flags"},
      {"(?i:abc)", "inline flags"},
      {"(?s).", "inline flags"},
      {"(?>a+)b", "atomic groups"},
      {"a*+b", "possessive"},
      {"a{2}+", "possessive"},
      {"(?(1)a|b)", "conditional"},
      {"\\p{L}", "Unicode property classes"},
      {"[\\P{L}]", "Unicode property classes"},
      {"\\N{DASH}", "named characters"},
      {"[[:alpha:]]", "POSIX classes"},
      {"\\q", "unsupported escape \\q"},
      {"a{10001}", "above the limit of 10000"},
      {"a{1,20000}", "above the limit of 10000"},
      {"a{3,2}", "min repeat greater than max repeat"},
      {"(ab", "missing ')' for the group opened at offset 0"},
      {"ab)", "unbalanced parenthesis"},
      {"[abc", "unterminated character class"},
      {"[^\\x00-\\U0010FFFF]", "matches no character"},
      {"[z-a]", "bad character range"},
      {"[\\d-z]", "bad character range"},
      {std::string("a\0b", 3), "NUL character"},
      {"\xFF", "not valid UTF-8"},
      {"*a", "nothing to repeat"},
      {"a|+", "nothing to repeat"},
      {"{2}", "nothing to repeat"},
      {"a**", "multiple repeat"},
      {"a{2}{3}", "multiple repeat"},
      {"\\uD800", "surrogate"},
      {"\\x4", "bad \\x escape"},
      {"\\u{110000}", "bad \\u escape"},
      {"(?<1x>a)", "bad group name"},
      {"(?Q)", "unknown group extension"},
      {"a\\", "trailing backslash"},
  };
  for (const auto& [pattern, needle] : cases) {
    const std::string message = error_of(pattern);
    EXPECT_NE(message.find(needle), std::string::npos)
        << testing::PrintToString(pattern) << " -> " << message;
  }
}

TEST(Regex, LiteralBracesAndPythonEscapes) {
  EXPECT_TRUE(full_match(compile("a{b}"), "a{b}"));
  EXPECT_TRUE(full_match(compile("x{1,"), "x{1,"));
  EXPECT_TRUE(full_match(compile("\\101\\0\\x7e"), std::string("A\0~", 3)));
  EXPECT_TRUE(full_match(compile("[\\b]"), "\b"));
  EXPECT_TRUE(full_match(compile("a{,}"), "aaaa"));
  EXPECT_TRUE(full_match(compile("\\u{1F600}\\U0001F601"), "\xF0\x9F\x98\x80\xF0\x9F\x98\x81"));
}

TEST(Regex, PartialCharactersAreRefusedAtTheFirstImpossibleByte) {
  const auto latin = compile("[à-ÿ]");  // U+00E0..U+00FF: C3 A0 .. C3 BF
  EXPECT_EQ(accepted_bytes(latin, "\xC4\x80"), 0u);
  EXPECT_EQ(accepted_bytes(latin, "\xC3\x9F"), 1u);
  EXPECT_EQ(accepted_bytes(latin, "\xC3\xA0"), 2u);
  const auto emoji = compile("[😀-😏]");  // U+1F600..U+1F60F: F0 9F 98 80..8F
  EXPECT_EQ(accepted_bytes(emoji, "\xF0\x9F\x98\x90"), 3u);
  EXPECT_EQ(accepted_bytes(emoji, "\xF0\x9F\x99"), 2u);
  EXPECT_EQ(accepted_bytes(emoji, "\xF0\xA0"), 1u);
  const auto dot = compile(".");
  EXPECT_EQ(accepted_bytes(dot, "\xED\xA0\x80"), 1u);  // a surrogate, encoded
  EXPECT_EQ(accepted_bytes(dot, "\xE0\x80\xAF"), 1u);  // overlong
  EXPECT_EQ(accepted_bytes(dot, "\xF4\x90\x80\x80"), 1u);
  EXPECT_EQ(accepted_bytes(dot, "\n"), 0u);
  EXPECT_EQ(accepted_bytes(compile("é"), "\xC3\xA8"), 1u);
}

TEST(Regex, NullableRootAllowsTheEmptyText) {
  for (const char* pattern : {"", "a*", "(ab)?", "^$", "(|x)", "[a-z]{0,3}"}) {
    ByteMatcher m(compile(pattern));
    EXPECT_TRUE(m.accepting()) << pattern;
  }
  ByteMatcher m(compile("^$"));
  EXPECT_TRUE(m.done());
  EXPECT_FALSE(m.feed('a'));
}

TEST(Regex, NestingLimits) {
  // Each level must be entered, and waits for its "b" in a repetition and a sequence frame.
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "(a";
  deep += "x";
  for (int i = 0; i < 40; ++i) deep += "b)+";
  EXPECT_NE(error_of(deep).find("nests too deeply"), std::string::npos);
  // Optional levels compile; the matcher stops opening them where the stack ends, and the
  // way out stays open.
  std::string optional;
  for (int i = 0; i < 40; ++i) optional += "(a";
  optional += "x";
  for (int i = 0; i < 40; ++i) optional += "b|z)";
  ByteMatcher m(compile(optional));
  int open = 0;
  while (m.feed('a')) ++open;
  EXPECT_GT(open, 10);
  EXPECT_LT(open, 40);
  EXPECT_TRUE(m.feed("z" + std::string(open, 'b')));
  EXPECT_TRUE(m.accepting());
  EXPECT_NE(error_of(std::string(300, '(') + "a" + std::string(300, ')')).find("nested more than"),
            std::string::npos);
  // Sequences inside sequences are flattened: no nesting at all.
  std::string flat;
  for (int i = 0; i < 100; ++i) flat += "(a";
  flat += "x";
  for (int i = 0; i < 100; ++i) flat += "b)";
  EXPECT_TRUE(full_match(compile(flat), std::string(100, 'a') + "x" + std::string(100, 'b')));
  // Nested groups that end together are tail calls: no extra frames.
  std::string tails;
  for (int i = 0; i < 100; ++i) tails += "a(";
  tails += "x";
  tails += std::string(100, ')');
  EXPECT_TRUE(full_match(compile(tails), std::string(100, 'a') + "x"));
}

TEST(Regex, RepetitionsOfNullableItemsStayBounded) {
  // (a*)* could split "aaaa" in many ways; the matcher keeps few states however long the text.
  const auto g = compile("(a*)*(b?c?)*d");
  ByteMatcher m(g);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.feed('a'));
  EXPECT_LE(m.stacks().size(), 4u);
  ASSERT_TRUE(m.feed("bcbbd"));
  EXPECT_TRUE(m.accepting());
}

TEST(Regex, RandomWalksNeverReachADeadEnd) {
  for (const char* pattern :
       {"(a|ab)(c|bcd)(d*)", "((a|b)+c){2,4}", "[a-z ]{0,30}\\.", "(\\d{1,3}\\.){3}\\d{1,3}",
        "(é|😀|[^\\x00-\\x7F]){1,3}x", "(((a)?b)?c)?d", "\\w+(\\s\\w+)*"}) {
    EXPECT_GT(test::check_random_walks(compile(pattern), 10, 40, 7), 10) << pattern;
  }
}

}  // namespace
}  // namespace kestrel::structured
