// IncrementalDetokenizer: streamed deltas are always whole UTF-8 characters and add up to
// decode() of all the ids, on byte-level vocabularies (the default model, tokenizer.json files)
// and on SentencePiece ones whose decode drops the first token's leading space.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "test_paths.h"
#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace kestrel {
namespace {

using Ids = std::vector<int32_t>;

const char* const kTexts[] = {
    "Hello, world! How are you today?",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81 "
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0",  // zh + ja
    // Family ZWJ sequence, thumbs up with skin tone, a flag, then Korean and Arabic.
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 ok "
    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5 "
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
    "  leading spaces, trailing tab\t\nnew line \xC3\xA9\xC3\xA8 caf\xC3\xA9",
    "<|im_start|>user\nhi \xF0\x9F\x98\x80<|im_end|>",
};

// An independent UTF-8 validity check by code-point arithmetic.
bool valid_char(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  const size_t n = b0 < 0x80 ? 1 : b0 >> 5 == 6 ? 2 : b0 >> 4 == 14 ? 3 : b0 >> 3 == 30 ? 4 : 0;
  if (n == 0 || s.size() != n) return false;
  uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return false;
    cp = cp << 6 | (b & 0x3F);
  }
  const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  return cp >= min[n] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    bool ok = false;
    for (size_t n = 1; n <= 4 && i + n <= s.size() && !ok; ++n) {
      if (valid_char(s.substr(i, n))) {
        i += n;
        ok = true;
      }
    }
    if (!ok) return false;
  }
  return true;
}

// Whether some valid character starts with `p`. Validity constrains each byte to an interval
// whose ends are among these values, so trying them as completions is enough.
bool valid_prefix(std::string_view p) {
  static const unsigned char kEnds[] = {0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF};
  if (valid_char(p)) return true;
  if (p.size() >= 4) return false;
  for (unsigned char c : kEnds) {
    if (valid_prefix(std::string(p) + static_cast<char>(c))) return true;
  }
  return false;
}

// Python's bytes.decode("utf-8", errors="replace"): each maximal invalid subpart → U+FFFD.
std::string repair(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    while (i + len < s.size() && len < 4 && valid_prefix(s.substr(i, len + 1))) ++len;
    if (valid_char(s.substr(i, len))) {
      out += s.substr(i, len);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += len;
  }
  return out;
}

struct Streamed {
  std::vector<std::string> deltas;  // one per push, then finish()
  std::string text;
};

Streamed stream(const Tokenizer& tok, const Ids& ids, bool skip, const Ids& prompt = {}) {
  IncrementalDetokenizer detok(tok, skip, prompt);
  Streamed s;
  for (int32_t id : ids) s.deltas.push_back(detok.push(id));
  s.deltas.push_back(detok.finish());
  for (const std::string& d : s.deltas) s.text += d;
  return s;
}

void expect_streams_like_decode(const Tokenizer& tok, const Ids& ids, const std::string& label) {
  for (bool skip : {false, true}) {
    const Streamed s = stream(tok, ids, skip);
    EXPECT_EQ(s.text, repair(tok.decode(ids, skip))) << label << " skip=" << skip;
    for (const std::string& d : s.deltas) {
      EXPECT_TRUE(is_valid_utf8(d)) << label << ": delta '" << d << "'";
    }
  }
}

// Every text streamed whole, and streamed after its own first half as a prompt.
void check_texts(const Tokenizer& tok, const std::string& name) {
  bool held_back = false;
  for (const char* text : kTexts) {
    const Ids ids = tok.encode(text, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids, true).find("\xEF\xBF\xBD"), std::string::npos);
    expect_streams_like_decode(tok, ids, name + ": " + text);
    const Streamed s = stream(tok, ids, true);
    for (size_t i = 0; i + 1 < s.deltas.size(); ++i) held_back |= s.deltas[i].empty();

    const size_t half = ids.size() / 2;
    const Ids prompt(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(half));
    const Ids rest(ids.begin() + static_cast<ptrdiff_t>(half), ids.end());
    const std::string full = tok.decode(ids, true), head = tok.decode(prompt, true);
    if (full.starts_with(head) && is_valid_utf8(head)) {
      EXPECT_EQ(stream(tok, rest, true, prompt).text, full.substr(head.size()))
          << name << " after a prompt: " << text;
    }
  }
  // Emoji span several byte-level tokens, so some push must have waited for the rest.
  EXPECT_TRUE(held_back) << name;
}

// Ids 0-255 are the bytes themselves; 256 is a control token.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  ByteLevelBpeSpec spec;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_unicode(static_cast<uint8_t>(b));
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xC0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    spec.tokens.push_back(s);
    spec.kinds.push_back(TokenKind::kNormal);
  }
  spec.tokens.push_back("<eos>");
  spec.kinds.push_back(TokenKind::kControl);
  auto t = ByteLevelBpe::create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? std::move(*t) : nullptr;
}

Ids bytes_of(std::string_view s) {
  Ids ids;
  for (char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

TEST(Detokenizer, HoldsBackUnfinishedCharacters) {
  auto tok = byte_tokenizer();
  ASSERT_TRUE(tok);
  const Streamed s = stream(*tok, bytes_of("a\xE4\xB8\xAD\xF0\x9F\x98\x80"), true);
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"a", "", "", "\xE4\xB8\xAD", "", "", "",
                                                "\xF0\x9F\x98\x80", ""}));
}

// Expected strings from Python: bytes.decode("utf-8", errors="replace").
TEST(Detokenizer, ReplacesIllFormedBytesLikePython) {
  auto tok = byte_tokenizer();
  ASSERT_TRUE(tok);
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(stream(*tok,
                   bytes_of("\xE4\xB8"
                            "a"),
                   true)
                .text,
            fffd + "a");
  EXPECT_EQ(stream(*tok, bytes_of("\xF0\x80\x80"), true).text, fffd + fffd + fffd);
  EXPECT_EQ(stream(*tok, bytes_of("\xED\xA0\x80x"), true).text, fffd + fffd + fffd + "x");
  EXPECT_EQ(stream(*tok, bytes_of("\xF4\x90\x80\x80"), true).text, fffd + fffd + fffd + fffd);
  EXPECT_EQ(stream(*tok, bytes_of("\xC0\xAF"), true).text, fffd + fffd);
  // An unfinished sequence at the end is flushed by finish() as one U+FFFD.
  const Streamed s = stream(*tok, bytes_of("\xE4\xB8\xAD\xF0\x9F"), true);
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"", "", "\xE4\xB8\xAD", "", "", fffd}));
}

TEST(Detokenizer, SkipsSpecialTokensAndIdsOutsideTheVocabulary) {
  auto tok = byte_tokenizer();
  ASSERT_TRUE(tok);
  const Ids ids = {'h', 256, 'i', -3, 9999};
  EXPECT_EQ(stream(*tok, ids, true).text, "hi");
  EXPECT_EQ(stream(*tok, ids, false).text, "h<eos>i");
}

TEST(Detokenizer, RandomIdsMatchRepairedDecode) {
  auto tok = byte_tokenizer();
  ASSERT_TRUE(tok);
  std::mt19937 rng(1234);
  // Mostly bytes that form or break multi-byte sequences.
  const int32_t pool[] = {'a',  ' ',  0xC3, 0xA9, 0xE4, 0xB8, 0xAD, 0xF0, 0x9F,
                          0x98, 0x80, 0xED, 0xA0, 0xFF, 0xC0, 0xF4, 0x90, 256};
  for (int trial = 0; trial < 300; ++trial) {
    Ids ids(1 + rng() % 24);
    for (int32_t& id : ids) id = pool[rng() % std::size(pool)];
    expect_streams_like_decode(*tok, ids, "trial " + std::to_string(trial));
  }
}

// A SentencePiece vocabulary: "<s>", bytes, and a few pieces with and without "▁".
std::unique_ptr<Tokenizer> spm_tokenizer() {
  SpmSpec spec;
  spec.tokens = {"<s>", "\xE2\x96\x81", "\xE2\x96\x81hello", "\xE2\x96\x81world", "hello"};
  spec.kinds = {SpmTokenKind::kControl, SpmTokenKind::kNormal, SpmTokenKind::kNormal,
                SpmTokenKind::kNormal, SpmTokenKind::kNormal};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    spec.tokens.push_back(buf);
    spec.kinds.push_back(SpmTokenKind::kByte);
  }
  spec.bos_id = 0;
  auto t = SpmTokenizer::create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? std::move(*t) : nullptr;
}

constexpr int32_t kBos = 0, kSpace = 1, kSpaceHello = 2, kSpaceWorld = 3, kHello = 4;
constexpr int32_t spm_byte(uint8_t b) {
  return 5 + b;
}

TEST(Detokenizer, SentencePieceLeadingSpaceOnlyAtTheStart) {
  auto tok = spm_tokenizer();
  ASSERT_TRUE(tok);
  const Ids ids = {kSpaceHello, kSpaceWorld, kSpace, kSpaceWorld};
  ASSERT_EQ(tok->decode(ids, true), "hello world  world");
  EXPECT_EQ(stream(*tok, ids, true).deltas,
            (std::vector<std::string>{"hello", " world", " ", " world", ""}));
  EXPECT_EQ(stream(*tok, Ids{kSpace, kSpace, kHello}, true).text, " hello");
  // After a prompt the first generated piece keeps its space.
  EXPECT_EQ(stream(*tok, Ids{kSpaceWorld}, true, Ids{kBos, kSpaceHello}).text, " world");
  EXPECT_EQ(stream(*tok, Ids{kSpaceWorld}, true, Ids{kBos}).text, "world");
  // "<s>" decoded in front stops the space from being the first character.
  EXPECT_EQ(stream(*tok, Ids{kBos, kSpaceHello}, false).deltas,
            (std::vector<std::string>{"<s>", " hello", ""}));
  EXPECT_EQ(stream(*tok, Ids{kBos, kSpaceHello}, true).deltas,
            (std::vector<std::string>{"", "hello", ""}));
}

TEST(Detokenizer, SentencePieceByteFallback) {
  auto tok = spm_tokenizer();
  ASSERT_TRUE(tok);
  const Ids ids = {spm_byte(' '),  spm_byte(0xC3), spm_byte(0xA9), kSpaceHello,
                   spm_byte(0xF0), spm_byte(0x9F), spm_byte(0x98), spm_byte(0x80)};
  EXPECT_EQ(
      stream(*tok, ids, true).deltas,
      (std::vector<std::string>{"", "", "\xC3\xA9", " hello", "", "", "", "\xF0\x9F\x98\x80", ""}));
  expect_streams_like_decode(*tok, ids, "spm bytes");
  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    Ids r(1 + rng() % 16);
    for (int32_t& id : r) id = static_cast<int32_t>(rng() % 12 < 6 ? rng() % 5 : 5 + rng() % 256);
    expect_streams_like_decode(*tok, r, "spm trial " + std::to_string(trial));
  }
}

TEST(Detokenizer, DefaultModelTokenizer) {
  const std::string path = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(path, "the default model (scripts/fetch-default-model.sh)");
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  auto tok = load_gguf_tokenizer(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  check_texts(**tok, "SmolLM2");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Ids ids(1 + rng() % 32);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % (*tok)->vocab_size());
    expect_streams_like_decode(**tok, ids, "SmolLM2 random " + std::to_string(trial));
  }
}

TEST(Detokenizer, SharedTokenizerJsonFiles) {
  const std::string root = test::shared_dir() + "/testdata/tokenizers";
  for (const char* name : {"qwen3", "deepseek_v3", "llama3_1", "gemma3"}) {
    KESTREL_SKIP_IF_ABSENT(root + "/" + name + "/tokenizer.json", "the shared tokenizer");
    auto tok = load_hf_tokenizer(root + "/" + name);
    if (!tok.ok()) {
      ADD_FAILURE() << name << ": " << tok.error().message;
      continue;
    }
    check_texts(**tok, name);
  }
}

}  // namespace
}  // namespace kestrel
