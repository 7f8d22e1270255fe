// compile_ebnf on hand-written grammars: what each accepts, the exact byte where a text is
// refused, deep right recursion, nesting past the matcher's depth, and random walks proving
// that no reachable state is a dead end.
#include "structured/ebnf.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generic_test_util.h"

namespace kestrel::structured {
namespace {

using test::accepted_bytes;
using test::full_match;

std::shared_ptr<const Grammar> compile(std::string_view text) {
  auto g = compile_ebnf(text);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return g.ok() ? *g : nullptr;
}

std::string error_of(std::string_view text) {
  auto g = compile_ebnf(text);
  return g.ok() ? "<compiled>" : g.error().message;
}

constexpr std::string_view kArithmetic = R"g(
# Integer arithmetic with precedence.
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)g";

constexpr std::string_view kJson = R"(
root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,2} )?
ws      ::= [ \t\n]*
)";

constexpr std::string_view kCsv = R"(
root   ::= row ("\n" row)* "\n"?
row    ::= field ("," field)*
field  ::= plain | quoted
plain  ::= [^,\n"]*
quoted ::= "\"" ([^"] | "\"\"")* "\""
)";

TEST(Ebnf, Arithmetic) {
  const auto g = compile(kArithmetic);
  for (const char* ok : {"1", "1+2*3", "(1+2)*3", "((4))", "-(2)/-3", "10-20-30"}) {
    EXPECT_TRUE(full_match(g, ok)) << ok;
  }
  EXPECT_EQ(accepted_bytes(g, "1++2"), 2u);
  EXPECT_EQ(accepted_bytes(g, ")"), 0u);
  EXPECT_EQ(accepted_bytes(g, "(1+2))"), 5u);
  EXPECT_EQ(accepted_bytes(g, "1 + 2"), 1u);  // no whitespace unless the grammar says so
  EXPECT_FALSE(full_match(g, "(1+2"));
  EXPECT_FALSE(full_match(g, ""));
  EXPECT_GT(test::check_random_walks(g, 20, 40, 1), 100);
}

TEST(Ebnf, JsonGrammarAcceptsJson) {
  const auto g = compile(kJson);
  for (const char* ok : {R"({"a": [1, 2.5e-3, true, null], "b": {"c": "\u00e9\n"}})", "[]", " {} ",
                         "-0.5", R"("x\"y")", "[[[[1]]]]"}) {
    EXPECT_TRUE(full_match(g, ok)) << ok;
  }
  EXPECT_EQ(accepted_bytes(g, R"({"a" 1})"), 5u);
  EXPECT_EQ(accepted_bytes(g, "[01]"), 2u);
  EXPECT_EQ(accepted_bytes(g, "\"a\x01\""), 2u);
  EXPECT_EQ(accepted_bytes(g, "[1,]"), 3u);
  EXPECT_EQ(accepted_bytes(g, R"("\u12g4")"), 5u);
  // Walks finished by a completion are JSON documents.
  std::mt19937 rng(11);
  for (int w = 0; w < 30; ++w) {
    ByteMatcher m(g);
    std::string text;
    for (int step = 0; step < 25; ++step) {
      const std::vector<uint8_t> bytes = test::allowed_bytes(m);
      if (bytes.empty()) break;
      const uint8_t c = bytes[rng() % bytes.size()];
      ASSERT_TRUE(m.feed(c));
      text += static_cast<char>(c);
    }
    const std::optional<std::string> rest = test::find_completion(m);
    ASSERT_TRUE(rest.has_value()) << testing::PrintToString(text);
    text += *rest;
    EXPECT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded())
        << testing::PrintToString(text);
  }
  EXPECT_GT(test::check_random_walks(g, 15, 40, 2), 100);
}

TEST(Ebnf, Csv) {
  const auto g = compile(kCsv);
  for (const char* ok : {"", "a,b,c", "a,,c\n1,2,3\n", "\"x,\"\"y\"\"\",z", ",", "\n"}) {
    EXPECT_TRUE(full_match(g, ok)) << ok;
  }
  EXPECT_EQ(accepted_bytes(g, "a\"b"), 1u);
  EXPECT_EQ(accepted_bytes(g, "\"a\"b"), 3u);
  EXPECT_FALSE(full_match(g, "\"open"));
  EXPECT_GT(test::check_random_walks(g, 20, 40, 3), 100);
}

TEST(Ebnf, NullableRulesAndRoot) {
  const auto g = compile(R"(
root ::= a b c
a ::= "x"?
b ::= "" | "y" b
c ::= ( )
)");
  ByteMatcher m(g);
  EXPECT_TRUE(m.accepting());  // the empty text is complete
  for (const char* ok : {"", "x", "y", "xyyy", "yy"}) EXPECT_TRUE(full_match(g, ok)) << ok;
  EXPECT_EQ(accepted_bytes(g, "yx"), 1u);
  EXPECT_EQ(accepted_bytes(g, "xx"), 1u);
  // Repetitions of nullable things terminate and keep their language.
  const auto rep = compile(R"(root ::= (a | b)* "!"
a ::= "a"?
b ::= ("b" | "")+)");
  for (const char* ok : {"!", "ab!", "bbba!", "aaaa!"}) EXPECT_TRUE(full_match(rep, ok)) << ok;
  EXPECT_EQ(accepted_bytes(rep, "ac"), 1u);
  EXPECT_GT(test::check_random_walks(rep, 10, 30, 4), 20);
}

TEST(Ebnf, DeepRightRecursionDoesNotGrowTheStack) {
  const auto list = compile(R"(root ::= item ("," root)?
item ::= [a-z]+)");
  std::string text = "a";
  for (int i = 0; i < 200; ++i) text += ",b";
  EXPECT_TRUE(full_match(list, text));
  const auto tail = compile(R"(root ::= "a" root | "")");
  EXPECT_TRUE(full_match(tail, std::string(500, 'a')));
  ByteMatcher m(tail);
  ASSERT_TRUE(m.feed(std::string(500, 'a')));
  for (const Stack& s : m.stacks()) EXPECT_LE(s.depth(), 3);
}

TEST(Ebnf, NestingPastTheDepthLimitIsRefusedWithoutDeadEnds) {
  const auto g = compile(R"g(root ::= "(" root ")" | "x")g");
  ByteMatcher m(g);
  int open = 0;
  while (m.feed('(')) ++open;
  EXPECT_GT(open, 10);
  EXPECT_LT(open, kMaxDepth);
  // The refused '(' leaves the way out open.
  EXPECT_TRUE(m.feed("x" + std::string(open, ')')));
  EXPECT_TRUE(m.accepting());
  EXPECT_GT(test::check_random_walks(g, 10, 60, 5), 30);
  // Near the limit every branch must still fit: after the last '(' the matcher takes, "[" is
  // only allowed while a three-frame class sequence and the closing "]" still fit.
  for (const char* text : {R"g(root ::= "(" root ")" | "[" t "]" | "x"
t ::= [a] [b] [c])g",
                           R"g(root ::= "(" root ")" | "{" u "}" | "x"
u ::= ([a] [b]){2,3} | "v" u "w")g",
                           R"g(root ::= "(" (root | list) ")" | "x"
list ::= "<" root ("," root)* ">")g"}) {
    const auto near = compile(text);
    ByteMatcher walk(near);
    int states = 0;
    for (int k = 0; walk.feed('('); ++k) {
      if (k > 8) states += test::check_all_paths(walk, 4);
    }
    states += test::check_all_paths(walk, 6);
    EXPECT_GT(states, 100) << text;
  }
  // A grammar that cannot finish within the depth is refused when compiled.
  std::string deep = "root ::= r0\n";
  for (int i = 0; i < 40; ++i) deep += fmt::format("r{} ::= \"a\" r{} \"b\"\n", i, i + 1);
  deep += "r40 ::= \"z\"\n";
  auto refused = compile_ebnf(deep);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("nests too deeply"), std::string::npos);
  // Parsers and the matcher's expansion recurse: deep groups and long chains of rules opened
  // before the first character are refused, long grammars are not.
  EXPECT_NE(error_of("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')'))
                .find("nested more than 200 deep"),
            std::string::npos);
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 1500; ++i) chain += fmt::format("r{} ::= r{} | \"a\"\n", i, i + 1);
  chain += "r1500 ::= \"z\"\n";
  EXPECT_NE(error_of(chain).find("more than 1000 rules or groups open"), std::string::npos);
  std::string list = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) list += fmt::format("r{} ::= \"a\" r{} | \"b\"\n", i, i + 1);
  list += "r5000 ::= \"z\"\n";
  const auto long_grammar = compile(list);
  EXPECT_TRUE(full_match(long_grammar, std::string(3000, 'a') + "b"));
}

// Each "a" doubles the parses (which closing letter it waits for); the matcher keeps at most
// kMaxStacks of them, and what it keeps can still be finished.
TEST(Ebnf, AmbiguityIsBounded) {
  const auto g = compile(R"(root ::= "a" root "b" | "a" root "c" | "")");
  ASSERT_TRUE(g);
  ByteMatcher m(g);
  for (int i = 0; i < 14; ++i) ASSERT_TRUE(m.feed('a')) << i;
  EXPECT_LE(m.stacks().size(), kMaxStacks);
  EXPECT_GT(m.stacks().size(), 64u);  // the grammar really is ambiguous
  EXPECT_TRUE(m.feed(std::string(14, 'b')));
  EXPECT_TRUE(m.accepting());
}

TEST(Ebnf, LiteralsEscapesAndClasses) {
  const auto g = compile(R"(root ::= "\x41\u00e9\U0001F600\"\\\t" [^a-c\]\-] [\u4e00-\u9fff] [^])");
  EXPECT_TRUE(full_match(g, "A\xC3\xA9\xF0\x9F\x98\x80\"\\\t!\xE4\xB8\xAD\n"));
  EXPECT_TRUE(full_match(g, "A\xC3\xA9\xF0\x9F\x98\x80\"\\\tz\xE4\xB8\xAD\xF0\x9F\x98\x81"));
  EXPECT_EQ(accepted_bytes(g, "A\xC3\xA9\xF0\x9F\x98\x80\"\\\t-"), 10u);
  // The CJK class refuses a three-byte lead below it at once, and a wrong second byte next.
  const std::string head = "A\xC3\xA9\xF0\x9F\x98\x80\"\\\tz";
  EXPECT_EQ(accepted_bytes(g, head + "\xE3"), head.size());
  EXPECT_EQ(accepted_bytes(g, head + "\xE4\xB7"), head.size() + 1);
  const auto rep = compile(R"(root ::= "ab"{2} "c"{1,2} "d"{2,} "e"{0})");
  EXPECT_TRUE(full_match(rep, "ababcdd"));
  EXPECT_TRUE(full_match(rep, "ababccddddd"));
  EXPECT_EQ(accepted_bytes(rep, "ababcccdd"), 6u);
  EXPECT_EQ(accepted_bytes(rep, "ababcde"), 6u);
}

TEST(Ebnf, ErrorsSayWhereAndWhat) {
  const std::pair<const char*, const char*> cases[] = {
      {"a ::= \"x\"", "no rule 'root'"},
      {"root ::= foo", "line 1, column 10: rule 'foo' is not defined"},
      {"root ::= zeta alpha\nalpha ::= beta", "line 1, column 10: rule 'zeta' is not defined"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "rule 'expr' is left-recursive"},
      {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left-recursive"},
      {"root ::= a\na ::= \"x\" a", "'a' can never finish"},
      {"root ::= \"abc", "line 1, column 10: this string literal is not closed"},
      {"root ::= \"a\nb\"", "a raw newline inside a string literal"},
      {"root ::= [a-", "line 1, column 10: this character class is not closed"},
      {"root ::= [z-a]", "range whose end is below its start"},
      {"root ::= [\\d]", "\\d is not supported in a character class"},
      {"root ::= [^\\x00-\\U0010FFFF]", "matches no character"},
      {"root ::= (\"a\" | \"b\"",
       "line 1, column 20: expected ')' to close the group opened at "
       "line 1, column 10"},
      {"root ::= \"a\"{,3}", "write {0,m}"},
      {"root ::= \"a\"{3,1}", "lower bound is above its upper bound"},
      {"root ::= \"a\"{20000}", "above the limit"},
      {"root ::= \"a\"++", "two repetition operators"},
      {"root ::= \"a\" )", "line 1, column 14: expected a rule name, found ')'"},
      {"root ::= \"\\q\"", "unknown escape \\q"},
      {"root ::= \"\\uD800\"", "surrogate"},
      {"root ::= | ", "<compiled>"},
      {"root ::= \"a\" x ::= \"b\"", "must start on its own line"},
      {"root ::= x\nx[temperature=0.5] ::= \"a\"", "rule options"},
      {"root ::= TagDispatch((\"<t>\", x))", "TagDispatch(...) is not supported"},
      {"root = \"a\"", "expected '::=' after the rule name 'root', found '='"},
      {"", "no rule 'root'"},
  };
  for (const auto& [text, needle] : cases) {
    const std::string message = error_of(text);
    EXPECT_NE(message.find(needle), std::string::npos) << text << " -> " << message;
  }
}

TEST(Ebnf, NamesCommentsAndLayout) {
  const auto g = compile(R"(# leading comment
root ::= first-part   # a comment
         "|"          # alternatives and sequences may span lines
         second.part
first-part ::= "a" |
               "b"
second.part ::= _x
_x ::= "c"
)");
  EXPECT_TRUE(full_match(g, "a|c"));
  EXPECT_TRUE(full_match(g, "b|c"));
  EXPECT_FALSE(full_match(g, "a|"));
}

TEST(Ebnf, LooksLikeLark) {
  EXPECT_TRUE(looks_like_lark("rule: 'abc'"));
  EXPECT_TRUE(looks_like_lark("start: value\nvalue: \"a\" | \"b\"\n"));
  EXPECT_TRUE(looks_like_lark("# root ::= x\nrule: 'a'"));  // only in a comment
  EXPECT_TRUE(looks_like_lark("a: b // x ::= y"));
  EXPECT_TRUE(looks_like_lark("   \n"));
  EXPECT_FALSE(looks_like_lark("rule ::= 'abc'"));
  EXPECT_FALSE(looks_like_lark(""));
  EXPECT_FALSE(looks_like_lark("\n\nroot ::= \"a\"  # comment"));
}

}  // namespace
}  // namespace kestrel::structured
