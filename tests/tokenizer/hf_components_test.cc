// tests/tokenizer/hf_components_test.cc — the parts of the tokenizer.json pipeline on small,
// hand-made inputs. Expected normalizations come from Python's unicodedata and the examples of
// UAX #15; expected splits from the Hugging Face tokenizers documentation of
// SplitDelimiterBehavior ("the-final--countdown").
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/hf_decoder.h"
#include "tokenizer/hf_normalizer.h"
#include "tokenizer/hf_pre_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"

namespace kestrel {
namespace {

using nlohmann::json;

std::string normalize_with(const json& j, const std::string& text) {
  auto n = parse_hf_normalizer(j);
  EXPECT_TRUE(n.ok()) << n.error().message;
  return (*n)->normalize(text);
}

std::vector<std::string> pre_tokenize_with(const json& j, const std::string& text,
                                           bool at_start = true) {
  auto p = parse_hf_pre_tokenizer(j);
  EXPECT_TRUE(p.ok()) << p.error().message;
  std::vector<std::string> out;
  for (const HfPiece& piece : hf_pre_tokenize(p->get(), {text, at_start}))
    out.push_back(piece.text);
  return out;
}

std::string decode_with(const json& j, std::vector<std::string> tokens) {
  auto d = parse_hf_decoder(j);
  EXPECT_TRUE(d.ok()) << d.error().message;
  (*d)->decode(tokens, false);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(HfNormalizerTest, UnicodeForms) {
  const json nfc = {{"type", "NFC"}};
  const json nfd = {{"type", "NFD"}};
  const json nfkc = {{"type", "NFKC"}};
  const json nfkd = {{"type", "NFKD"}};
  // Reordering by combining class, then composition of the starter with the cedilla only.
  EXPECT_EQ(normalize_with(nfc, "e\u0301\u0327"), "\u0229\u0301");
  EXPECT_EQ(normalize_with(nfd, "\u1e69"), "s\u0323\u0307");
  // A composition exclusion stays decomposed; a singleton maps to its canonical equivalent.
  EXPECT_EQ(normalize_with(nfc, "\u0958"), "\u0915\u093c");
  EXPECT_EQ(normalize_with(nfc, "\u212b"), "\u00c5");
  EXPECT_EQ(normalize_with(nfc, "\ufb01\u2075"), "\ufb01\u2075");
  EXPECT_EQ(normalize_with(nfkc, "\ufb01\u2075"), "fi5");
  // Hangul, both ways.
  EXPECT_EQ(normalize_with(nfc, "\u1112\u1161\u11ab"), "\ud55c");
  EXPECT_EQ(normalize_with(nfd, "\ud55c"), "\u1112\u1161\u11ab");
  // A second mark of the same class is blocked from composing.
  EXPECT_EQ(normalize_with(nfc, "a\u0308\u0301b"), "\u00e4\u0301b");
  // UAX #15's long s with dot above and dot below.
  EXPECT_EQ(normalize_with(nfc, "\u1e9b\u0323"), "\u1e9b\u0323");
  EXPECT_EQ(normalize_with(nfkd, "\u1e9b\u0323"), "s\u0323\u0307");
  // Invalid bytes pass through.
  EXPECT_EQ(normalize_with(nfc, "e\xff\u0301"), "e\xff\u0301");
}

TEST(HfNormalizerTest, ReplacePrependStripSequence) {
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  EXPECT_EQ(normalize_with(replace, "a b  c"), "a\u2581b\u2581\u2581c");
  const json regex = {{"type", "Replace"}, {"pattern", {{"Regex", "[0-9]+"}}}, {"content", "#"}};
  EXPECT_EQ(normalize_with(regex, "a12b3"), "a#b#");
  const json prepend = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  EXPECT_EQ(normalize_with(prepend, "hi"), "\u2581hi");
  EXPECT_EQ(normalize_with(prepend, ""), "");
  const json strip = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}};
  EXPECT_EQ(normalize_with(strip, " \t\u3000x "), "x ");
  // Per-character full mappings: İ becomes i + combining dot; a lone final Σ is plain σ.
  const json lower = {{"type", "Lowercase"}};
  EXPECT_EQ(normalize_with(lower, "ABC \u0130 \u039f\u03a3 \u00c9\xff"),
            "abc i\u0307 \u03bf\u03c3 \u00e9\xff");
  const json seq = {{"type", "Sequence"}, {"normalizers", {prepend, replace}}};
  EXPECT_EQ(normalize_with(seq, "a b"), "\u2581a\u2581b");
  EXPECT_FALSE(parse_hf_normalizer({{"type", "NoSuchNormalizer"}}).ok());
}

json split(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"String", "-"}}},
          {"behavior", behavior},
          {"invert", invert}};
}

TEST(HfPreTokenizerTest, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize_with(split("Removed"), text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pre_tokenize_with(split("Isolated"), text),
            (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize_with(split("MergedWithPrevious"), text),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize_with(split("MergedWithNext"), text),
            (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pre_tokenize_with(split("Contiguous"), text),
            (V{"the", "-", "final", "--", "countdown"}));
  // Inverted, the words are the matches and the dashes what lies between them.
  EXPECT_EQ(pre_tokenize_with(split("Removed", true), text), (V{"-", "-", "-"}));
  EXPECT_FALSE(parse_hf_pre_tokenizer(split("Sideways")).ok());
}

TEST(HfPreTokenizerTest, RegexWhitespaceFollowsRust) {
  // Rust's \s is Unicode White_Space: U+0085 is space, U+FEFF and U+180E are not.
  const json j = {{"type", "Split"},
                  {"pattern", {{"Regex", "\\s+"}}},
                  {"behavior", "Removed"},
                  {"invert", false}};
  EXPECT_EQ(pre_tokenize_with(j, "a\u0085b\ufeffc\u180ed e"),
            (std::vector<std::string>{"a", "b\ufeffc\u180ed", "e"}));
  const json cls = {{"type", "Split"},
                    {"pattern", {{"Regex", "[^\\s\\p{L}]+"}}},
                    {"behavior", "Removed"},
                    {"invert", false}};
  EXPECT_EQ(pre_tokenize_with(cls, "ab\u180e12 cd"), (std::vector<std::string>{"ab", " cd"}));
}

TEST(HfPreTokenizerTest, ByteLevelDigitsSequence) {
  const json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  // Spaces spell as Ġ (U+0120); é's bytes C3 A9 spell as Ã ©.
  EXPECT_EQ(pre_tokenize_with(bl, "hi you\xc3\xa9"),
            (std::vector<std::string>{"\u0120hi", "\u0120you\u00c3\u00a9"}));
  const json digits = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(pre_tokenize_with(digits, "a123"), (std::vector<std::string>{"a", "1", "2", "3"}));
  const json runs = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pre_tokenize_with(runs, "a123b4"), (std::vector<std::string>{"a", "123", "b", "4"}));
  const json seq = {{"type", "Sequence"}, {"pretokenizers", {split("Removed"), digits}}};
  EXPECT_EQ(pre_tokenize_with(seq, "x1-y"), (std::vector<std::string>{"x", "1", "y"}));
}

TEST(HfPreTokenizerTest, Metaspace) {
  const json always = {{"type", "Metaspace"},
                       {"replacement", "\u2581"},
                       {"prepend_scheme", "always"},
                       {"split", true}};
  EXPECT_EQ(pre_tokenize_with(always, "Hey friend"),
            (std::vector<std::string>{"\u2581Hey", "\u2581friend"}));
  EXPECT_EQ(pre_tokenize_with(always, "Hey", false), (std::vector<std::string>{"\u2581Hey"}));
  const json first = {{"type", "Metaspace"},
                      {"replacement", "\u2581"},
                      {"prepend_scheme", "first"},
                      {"split", false}};
  EXPECT_EQ(pre_tokenize_with(first, "a b", true), (std::vector<std::string>{"\u2581a\u2581b"}));
  EXPECT_EQ(pre_tokenize_with(first, "a b", false), (std::vector<std::string>{"a\u2581b"}));
}

TEST(HfDecoderTest, Decoders) {
  EXPECT_EQ(
      decode_with({{"type", "ByteLevel"}}, {"\u0120hi", "\u00c3\u00a9", "<\uff5cUser\uff5c>"}),
      " hi\xc3\xa9<\uff5cUser\uff5c>");
  const json fallback = {{"type", "ByteFallback"}};
  EXPECT_EQ(decode_with(fallback, {"<0xE2>", "<0x82>", "<0xAC>", "a"}), "\u20aca");
  // An invalid run gives one U+FFFD per byte token.
  EXPECT_EQ(decode_with(fallback, {"<0xE2>", "<0x82>", "a"}), "\ufffd\ufffda");
  const json meta = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(decode_with(meta, {"\u2581Hey", "\u2581friend"}), "Hey friend");
  // In the first token every replacement character is dropped, as the HF decoder does.
  EXPECT_EQ(decode_with(meta, {"\u2581\u2581a\u2581b", "\u2581\u2581c"}), "ab  c");
  const json never = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}};
  EXPECT_EQ(decode_with(never, {"\u2581a", "\u2581b"}), " a b");
  const json strip = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}};
  EXPECT_EQ(decode_with(strip, {"  a", " b"}), " ab");
  const json seq = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                      fallback,
                      {{"type", "Fuse"}}}}};
  EXPECT_EQ(decode_with(seq, {"\u2581a", "<0x41>", "\u2581\u2581"}), " aA  ");
  EXPECT_FALSE(parse_hf_decoder({{"type", "Nope"}}).ok());
}

// A tiny SentencePiece-style vocabulary: characters, one merge, byte fallback for the rest.
json tiny_tokenizer(const json& added) {
  json t = json::parse(R"({
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    "pre_tokenizer": null,
    "post_processor": {
      "type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
    },
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"},
      {"type": "Fuse"}]},
    "model": {
      "type": "BPE",
      "vocab": {"<unk>": 0, "<s>": 1, "a": 2, "b": 3, "\u2581": 4, "ab": 5,
                "<0x41>": 6, "<0xC3>": 7, "<0xA9>": 8},
      "merges": [["a", "b"]],
      "unk_token": "<unk>",
      "fuse_unk": true,
      "byte_fallback": true
    }
  })");
  t["added_tokens"] = added;
  return t;
}

json added_token(int id, const std::string& content, bool lstrip, bool rstrip, bool single_word) {
  return {{"id", id},           {"content", content}, {"special", true},
          {"lstrip", lstrip},   {"rstrip", rstrip},   {"single_word", single_word},
          {"normalized", false}};
}

std::vector<int32_t> encode(const json& tokenizer, const std::string& text, bool add = false,
                            const std::string& config = "") {
  auto tok = parse_hf_tokenizer(tokenizer.dump(), config);
  EXPECT_TRUE(tok.ok()) << tok.error().message;
  return tok.ok() ? (*tok)->encode(text, add) : std::vector<int32_t>{};
}

using Ids = std::vector<int32_t>;

TEST(HfTokenizerTest, BpeWithByteFallbackAndUnknown) {
  const json t = tiny_tokenizer(json::array());
  EXPECT_EQ(encode(t, "ab a"), (Ids{5, 4, 2}));
  // "A" has a byte token; "é" is two byte tokens; "zz" has neither and fuses into one <unk>.
  EXPECT_EQ(encode(t, "A\u00e9zzb"), (Ids{6, 7, 8, 0, 3}));
  EXPECT_EQ(encode(t, "ab", true), (Ids{1, 5}));
  auto tok = parse_hf_tokenizer(t.dump(), "");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->decode(Ids{5, 4, 6, 7, 8}, false), "ab A\u00e9");
  EXPECT_EQ((*tok)->token_bytes(7), "\xc3");
}

TEST(HfTokenizerTest, AddedTokenStripAndSingleWord) {
  const std::string text = "ab [M] ab";
  EXPECT_EQ(encode(tiny_tokenizer(json::array({added_token(9, "[M]", false, false, false)})), text),
            (Ids{5, 4, 9, 4, 5}));
  EXPECT_EQ(encode(tiny_tokenizer(json::array({added_token(9, "[M]", true, false, false)})), text),
            (Ids{5, 9, 4, 5}));
  EXPECT_EQ(encode(tiny_tokenizer(json::array({added_token(9, "[M]", false, true, false)})), text),
            (Ids{5, 4, 9, 5}));
  const json single = tiny_tokenizer(json::array({added_token(9, "[M]", false, false, true)}));
  EXPECT_EQ(encode(single, text), (Ids{5, 4, 9, 4, 5}));
  EXPECT_EQ(encode(single, "a[M]b"), (Ids{2, 0, 3}));  // inside a word: not the added token
}

TEST(HfTokenizerTest, LongestAddedTokenWins) {
  const json t = tiny_tokenizer(
      {added_token(9, "[M]", false, false, false), added_token(10, "[M]]", false, false, false)});
  EXPECT_EQ(encode(t, "a[M]]b"), (Ids{2, 10, 3}));
  EXPECT_EQ(encode(t, "[M]b"), (Ids{9, 3}));
}

TEST(HfTokenizerTest, SplitSpecialTokensEncodesThemAsText) {
  json plain = added_token(11, "ab", false, false, false);
  plain["special"] = false;
  const json t = tiny_tokenizer({added_token(9, "[M]", false, false, false), plain});
  EXPECT_EQ(encode(t, "[M]ab"), (Ids{9, 11}));
  // Special tokens become text ("[M]" has no pieces: one fused <unk>); non-special ones match.
  EXPECT_EQ(encode(t, "[M]ab", false, R"({"split_special_tokens": true})"), (Ids{0, 11}));
  auto tok = parse_hf_tokenizer(t.dump(), R"({"split_special_tokens": true})");
  ASSERT_TRUE(tok.ok());
  EXPECT_TRUE((*tok)->is_special(9));
}

TEST(HfTokenizerTest, ConfigAddBosOverridesTemplate) {
  const json t = tiny_tokenizer(json::array());
  EXPECT_EQ(encode(t, "a", true, R"({"add_bos_token": false, "bos_token": "<s>"})"), (Ids{2}));
  EXPECT_EQ(encode(t, "a", true, R"({"bos_token": "<s>"})"), (Ids{1, 2}));
  json no_template = t;
  no_template["post_processor"] = nullptr;
  EXPECT_EQ(encode(no_template, "a", true, R"({"add_bos_token": true, "bos_token": "<s>"})"),
            (Ids{1, 2}));
  EXPECT_EQ(encode(no_template, "a", true, R"({"add_eos_token": true, "eos_token": "b"})"),
            (Ids{2, 3}));
}

TEST(HfTokenizerTest, BadInputIsAnError) {
  EXPECT_FALSE(parse_hf_tokenizer("{not json", "").ok());
  EXPECT_FALSE(parse_hf_tokenizer(R"({"model": {"type": "Unigram", "vocab": []}})", "").ok());
  json t = tiny_tokenizer(json::array());
  t["model"]["unk_token"] = "<missing>";
  EXPECT_FALSE(parse_hf_tokenizer(t.dump(), "").ok());
  EXPECT_FALSE(load_hf_tokenizer("/nonexistent/dir").ok());
}

}  // namespace
}  // namespace kestrel
