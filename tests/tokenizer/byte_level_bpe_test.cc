// Byte-level BPE on tiny hand-built vocabularies: merge order, literal tokens, pre-tokenizer
// splitting and input validation. Expected ids and pieces are derived by hand from the rules.
#include "tokenizer/byte_level_bpe.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/pre_tokenizer.h"

namespace kestrel {
namespace {

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the byte alphabet stays below U+0800
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A token's spelling in the byte alphabet.
std::string spell(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += utf8(byte_to_unicode(static_cast<uint8_t>(c)));
  return s;
}

using Merges = std::vector<std::pair<std::string, std::string>>;

// Ids 0..255 are the single bytes; `extra` tokens follow from id 256. Merges are given as raw
// byte strings and spelled here.
ByteLevelBpeSpec tiny_spec(const std::vector<std::string>& extra, const Merges& merges) {
  ByteLevelBpeSpec spec;
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(spell(std::string(1, static_cast<char>(b))));
  for (const std::string& t : extra) spec.tokens.push_back(spell(t));
  for (const auto& [left, right] : merges) spec.merges.push_back(spell(left) + " " + spell(right));
  return spec;
}

std::unique_ptr<ByteLevelBpe> make(ByteLevelBpeSpec spec) {
  auto bpe = ByteLevelBpe::create(std::move(spec));
  EXPECT_TRUE(bpe.ok()) << (bpe.ok() ? "" : bpe.error().message);
  return bpe.ok() ? std::move(bpe).value() : nullptr;
}

using Ids = std::vector<int32_t>;

TEST(ByteAlphabet, MatchesGpt2Spelling) {
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(byte_to_unicode('~'), U'~');
  EXPECT_EQ(byte_to_unicode(0xE9), U'\u00E9');
  EXPECT_EQ(byte_to_unicode(0x00), U'\u0100');
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(byte_to_unicode(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_unicode(0xA0), U'\u0142');
  EXPECT_EQ(byte_to_unicode(0xAD), U'\u0143');
}

TEST(ByteLevelBpe, MergePriorityFollowsRank) {
  const std::vector<std::string> extra = {"ab", "bc", "abc"};  // ids 256, 257, 258
  // "b c" outranks "a b", and "a bc" then completes the word.
  EXPECT_EQ(make(tiny_spec(extra, {{"b", "c"}, {"a", "b"}, {"a", "bc"}}))->encode("abc", false),
            Ids{258});
  EXPECT_EQ(make(tiny_spec(extra, {{"a", "b"}, {"b", "c"}, {"a", "bc"}}))->encode("abc", false),
            (Ids{256, 'c'}));
  EXPECT_EQ(make(tiny_spec(extra, {{"b", "c"}, {"a", "b"}}))->encode("abc", false),
            (Ids{'a', 257}));
}

TEST(ByteLevelBpe, EqualRanksMergeLeftmostFirst) {
  auto bpe = make(tiny_spec({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(bpe->encode("aaa", false), (Ids{256, 'a'}));
  EXPECT_EQ(bpe->encode("aaaaa", false), (Ids{256, 256, 'a'}));
}

TEST(ByteLevelBpe, LaterMergesBuildOnEarlierOnes) {
  // "aaaa" → "aa aa" → "aaaa"; a lone "aa" cannot become "aaaa".
  auto bpe = make(tiny_spec({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  EXPECT_EQ(bpe->encode("aaaaaa", false), (Ids{257, 256}));
}

TEST(ByteLevelBpe, MergesStayInsidePreTokenizedPieces) {
  // GPT-2 splitting gives "a" and " b", so the "a Ġ" merge never sees its pair.
  auto bpe = make(tiny_spec({"a ", " b"}, {{"a", " "}, {" ", "b"}}));
  EXPECT_EQ(bpe->encode("a b", false), (Ids{'a', 257}));
}

TEST(ByteLevelBpe, DigitSplittingKeepsNumbersApart) {
  const std::vector<std::string> extra = {"12"};
  auto gpt2 = make(tiny_spec(extra, {{"1", "2"}}));
  EXPECT_EQ(gpt2->encode("x12", false), (Ids{'x', 256}));
  ByteLevelBpeSpec spec = tiny_spec(extra, {{"1", "2"}});
  spec.split_patterns = {std::string(kDigitSplitPattern), std::string(kGpt2SplitPattern)};
  EXPECT_EQ(make(std::move(spec))->encode("x12", false), (Ids{'x', '1', '2'}));
}

TEST(ByteLevelBpe, IgnoreMergesEmitsWholeTokenPieces) {
  ByteLevelBpeSpec spec = tiny_spec({"ab", "abc"}, {{"a", "b"}});
  EXPECT_EQ(make(spec)->encode("abc", false), (Ids{256, 'c'}));
  spec.ignore_merges = true;
  EXPECT_EQ(make(std::move(spec))->encode("abc", false), Ids{257});
}

TEST(ByteLevelBpe, LiteralTokensAreMatchedLongestFirst) {
  ByteLevelBpeSpec spec = tiny_spec({"ab"}, {{"a", "b"}});
  spec.tokens.push_back("<s>");   // 257, control
  spec.tokens.push_back("<s>x");  // 258, user-defined
  spec.kinds.assign(spec.tokens.size(), TokenKind::kNormal);
  spec.kinds[257] = TokenKind::kControl;
  spec.kinds[258] = TokenKind::kUserDefined;
  auto bpe = make(std::move(spec));
  const Ids ids = bpe->encode("ab<s>x<s>ab <s", false);
  EXPECT_EQ(ids, (Ids{256, 258, 257, 256, ' ', '<', 's'}));
  EXPECT_EQ(bpe->decode(ids, false), "ab<s>x<s>ab <s");
  EXPECT_EQ(bpe->decode(ids, true), "ab<s>xab <s");
  EXPECT_TRUE(bpe->is_special(257));
  EXPECT_FALSE(bpe->is_special(258));
  EXPECT_FALSE(bpe->is_special(256));
  EXPECT_FALSE(bpe->is_special(-1));
}

TEST(ByteLevelBpe, SpecialTokensAddedOnRequest) {
  ByteLevelBpeSpec spec = tiny_spec({"<bos>", "<eos>"}, {});
  spec.kinds.assign(spec.tokens.size(), TokenKind::kNormal);
  spec.kinds[256] = spec.kinds[257] = TokenKind::kControl;
  spec.tokens[256] = "<bos>";
  spec.tokens[257] = "<eos>";
  spec.bos_id = 256;
  spec.eos_ids = {257};
  spec.add_bos = true;
  spec.add_eos = true;
  auto bpe = make(std::move(spec));
  EXPECT_EQ(bpe->encode("hi", true), (Ids{256, 'h', 'i', 257}));
  EXPECT_EQ(bpe->encode("hi", false), (Ids{'h', 'i'}));
  EXPECT_EQ(bpe->bos_id(), 256);
  EXPECT_EQ(bpe->eos_ids(), Ids{257});
}

TEST(ByteLevelBpe, InvalidUtf8RoundTripsByteByByte) {
  auto bpe = make(tiny_spec({"ab"}, {{"a", "b"}}));
  const std::string text =
      "\xff"
      "ab\xc3(\xed\xa0\x80!";  // stray, truncated, surrogate
  const Ids ids = bpe->encode(text, false);
  EXPECT_EQ(ids, (Ids{0xFF, 256, 0xC3, '(', 0xED, 0xA0, 0x80, '!'}));
  EXPECT_EQ(bpe->decode(ids, false), text);
}

TEST(ByteLevelBpe, OutOfRangeIdsDecodeToNothing) {
  auto bpe = make(tiny_spec({}, {}));
  EXPECT_EQ(bpe->decode(Ids{'o', -3, 99999, 'k'}, false), "ok");
  EXPECT_EQ(bpe->token_bytes(256), "");
  EXPECT_EQ(bpe->token_bytes(' '), " ");
  EXPECT_EQ(bpe->vocab_size(), 256);
}

TEST(ByteLevelBpe, RejectsBrokenVocabularies) {
  ByteLevelBpeSpec bad_merge = tiny_spec({"ab"}, {});
  bad_merge.merges = {"ab"};
  EXPECT_FALSE(ByteLevelBpe::create(bad_merge).ok());

  ByteLevelBpeSpec bad_kinds = tiny_spec({}, {});
  bad_kinds.kinds = {TokenKind::kNormal};
  EXPECT_FALSE(ByteLevelBpe::create(bad_kinds).ok());

  ByteLevelBpeSpec bad_bos = tiny_spec({}, {});
  bad_bos.bos_id = 256;
  EXPECT_FALSE(ByteLevelBpe::create(bad_bos).ok());

  ByteLevelBpeSpec bad_regex = tiny_spec({}, {});
  bad_regex.split_patterns = {"(unclosed"};
  EXPECT_FALSE(ByteLevelBpe::create(bad_regex).ok());

  EXPECT_FALSE(ByteLevelBpe::create(ByteLevelBpeSpec{}).ok());
}

TEST(ByteLevelBpe, BytesWithoutTokensAreDroppedAndNeighboursMerge) {
  ByteLevelBpeSpec spec = tiny_spec({"!!"}, {{"!", "!"}});
  spec.tokens[0x04] = spell("zz");  // byte 0x04 now has no token of its own
  auto bpe = make(std::move(spec));
  EXPECT_EQ(bpe->encode("!\x04!", false), Ids{256});
  EXPECT_EQ(bpe->encode("\x04", false), Ids{});
}

TEST(ByteLevelBpe, MergesOfUnknownTokensAreSkipped) {
  auto bpe = make(tiny_spec({"ab"}, {{"a", "b"}, {"x", "y"}}));  // "xy" is not in the vocabulary
  EXPECT_EQ(bpe->encode("abxy", false), (Ids{256, 'x', 'y'}));
}

std::vector<std::string> split(std::vector<std::string> patterns, std::string_view text) {
  auto splitter = RegexSplitter::create(patterns);
  EXPECT_TRUE(splitter.ok());
  std::vector<std::string_view> views;
  splitter->split(text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;
const std::string kGpt2(kGpt2SplitPattern);

TEST(RegexSplitter, Gpt2Pattern) {
  EXPECT_EQ(split({kGpt2}, "Hello world's  12345!!\n"),
            (Pieces{"Hello", " world", "'s", " ", " 12345", "!!", "\n"}));
  EXPECT_EQ(split({kGpt2}, "a\tb  "), (Pieces{"a", "\t", "b", "  "}));
}

TEST(RegexSplitter, DigitsThenGpt2) {
  EXPECT_EQ(split({std::string(kDigitSplitPattern), kGpt2}, "ab 123"),
            (Pieces{"ab", " ", "1", "2", "3"}));
}

TEST(RegexSplitter, Llama3Pattern) {
  EXPECT_EQ(split({std::string(kLlama3SplitPattern)}, "Hello WORLD'S 12345\n\n  x"),
            (Pieces{"Hello", " WORLD", "'S", " ", "123", "45", "\n\n", " ", " x"}));
}

TEST(RegexSplitter, Qwen2Pattern) {
  EXPECT_EQ(split({std::string(kQwen2SplitPattern)}, "abc 2024!\n"),
            (Pieces{"abc", " ", "2", "0", "2", "4", "!\n"}));
}

TEST(RegexSplitter, UnicodeClassesAndInvalidBytes) {
  EXPECT_EQ(split({kGpt2}, "日本 Привет ½"), (Pieces{"日本", " Привет", " ½"}));
  EXPECT_EQ(split({kGpt2},
                  "a\xff"
                  "b"),
            (Pieces{"a", "\xff", "b"}));
}

TEST(RegexSplitter, PiecesAlwaysConcatenateToTheInput) {
  const std::string text = "  x\r\n\t 1.5e3 — «q» 👍🏽\xc3 end ";
  for (const auto& patterns : {Pieces{kGpt2}, Pieces{std::string(kLlama3SplitPattern)},
                               Pieces{std::string(kDigitSplitPattern), kGpt2}}) {
    std::string joined;
    for (const std::string& p : split(patterns, text)) joined += p;
    EXPECT_EQ(joined, text);
  }
}

TEST(Utf8, ValidPrefix) {
  EXPECT_EQ(valid_utf8_prefix("abc"), 3u);
  EXPECT_EQ(valid_utf8_prefix("é€😀"), 9u);
  EXPECT_EQ(valid_utf8_prefix("a\xc0\x80"), 1u);          // overlong NUL
  EXPECT_EQ(valid_utf8_prefix("a\xed\xa0\x80"), 1u);      // surrogate
  EXPECT_EQ(valid_utf8_prefix("a\xf4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(valid_utf8_prefix("ab\xe2\x82"), 2u);         // truncated
}

}  // namespace
}  // namespace kestrel
