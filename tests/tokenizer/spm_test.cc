// SentencePiece-style BPE: a tiny hand-made vocabulary whose expected ids follow from the
// algorithm by hand (llama.cpp's llm_tokenizer_spm rules: best score first, leftmost on ties,
// <0xXX> byte fallback, "▁" space prefix), loaded directly and through an in-memory GGUF.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "test_paths.h"
#include "tokenizer/spm_tokenizer.h"

namespace kestrel {
namespace {

using Ids = std::vector<int32_t>;

// Ids of the tiny vocabulary: 0-2 <unk> <s> </s>, 3-258 <0x00>..<0xFF>, then normal pieces.
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
constexpr int32_t byte_id(uint8_t b) {
  return 3 + b;
}
constexpr int32_t kSpace = 259, kH = 260, kE = 261, kL = 262, kO = 263, kW = 264, kR = 265,
                  kD = 266, kLl = 267, kHe = 268, kHell = 269, kSpaceH = 270, kLlo = 271,
                  kSpaceHe = 272, kHello = 273, kSpaceW = 274, kOr = 275, kSpaceWor = 276, kA = 277,
                  kAa = 278, kTool = 279;

struct Piece {
  const char* text;
  float score;
};

// Scores chosen so that "▁hello" needs the full heap logic: ll (-1) before he (-2), then
// hell (-3) beats the now-stale ▁h, llo and ▁he pairs, then hello (-7).
constexpr Piece kPieces[] = {
    {"\xE2\x96\x81", -10},
    {"h", -10},
    {"e", -10},
    {"l", -10},
    {"o", -10},
    {"w", -10},
    {"r", -10},
    {"d", -10},
    {"ll", -1},
    {"he", -2},
    {"hell", -3},
    {"\xE2\x96\x81h", -4},
    {"llo", -5},
    {"\xE2\x96\x81he", -6},
    {"hello", -7},
    {"\xE2\x96\x81w", -3},
    {"or", -3},
    {"\xE2\x96\x81wor", -2},
    {"a", -10},
    {"aa", -1},
};

SpmSpec tiny_spec() {
  SpmSpec spec;
  const auto add = [&](std::string text, float score, SpmTokenKind kind) {
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(score);
    spec.kinds.push_back(kind);
  };
  add("<unk>", 0, SpmTokenKind::kControl);
  add("<s>", 0, SpmTokenKind::kControl);
  add("</s>", 0, SpmTokenKind::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, SpmTokenKind::kByte);
  }
  for (const Piece& p : kPieces) add(p.text, p.score, SpmTokenKind::kNormal);
  add("<tool>", 0, SpmTokenKind::kUserDefined);
  spec.bos_id = kBos;
  spec.eos_ids = {kEos};
  spec.unknown_id = kUnk;
  return spec;
}

std::unique_ptr<SpmTokenizer> make(SpmSpec spec) {
  auto t = SpmTokenizer::create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(Spm, MergesBestScoreFirst) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello", false), (Ids{kSpace, kHello}));
  // ▁w and or tie at -3; then ▁wor (-2); l and d stay single.
  EXPECT_EQ(t->encode("hello world", false), (Ids{kSpace, kHello, kSpaceWor, kL, kD}));
  EXPECT_EQ(t->encode("hello", true), (Ids{kBos, kSpace, kHello}));
}

TEST(Spm, LeftmostPairWinsTies) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  // Both "aa" pairs score the same; the left one merges, so the lone "a" is last.
  EXPECT_EQ(t->encode("aaa", false), (Ids{kSpace, kAa, kA}));
  EXPECT_EQ(t->encode("aaaa", false), (Ids{kSpace, kAa, kAa}));
}

TEST(Spm, UnknownCharactersFallBackToBytes) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("\xC3\xA9", false), (Ids{kSpace, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(t->encode("a\xF0\x9F\x99\x82", false),
            (Ids{kSpace, kA, byte_id(0xF0), byte_id(0x9F), byte_id(0x99), byte_id(0x82)}));
  // Invalid UTF-8 is one symbol per byte.
  EXPECT_EQ(t->encode("\xFF\xC3", false), (Ids{kSpace, byte_id(0xFF), byte_id(0xC3)}));
  // Spaces inside the text are "▁" too; two in a row stay two tokens.
  EXPECT_EQ(t->encode("a  a", false), (Ids{kSpace, kA, kSpace, kSpace, kA}));
}

TEST(Spm, LiteralTokensSplitTheTextAndRestartTheSpacePrefix) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("<s>hello", false), (Ids{kBos, kSpace, kHello}));
  EXPECT_EQ(t->encode("aa<tool>hello</s>", false), (Ids{kSpace, kAa, kTool, kSpace, kHello, kEos}));
  EXPECT_EQ(t->encode("<tool>", false), (Ids{kTool}));
  EXPECT_EQ(t->encode("", true), (Ids{kBos}));
}

TEST(Spm, WithoutBytesAnUnknownCharacterIsTheUnknownToken) {
  SpmSpec spec;
  spec.tokens = {"<unk>", "\xE2\x96\x81", "a"};
  spec.kinds = {SpmTokenKind::kControl, SpmTokenKind::kNormal, SpmTokenKind::kNormal};
  spec.unknown_id = 0;
  auto t = make(spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a\xC3\xA9"
                      "a",
                      false),
            (Ids{1, 2, 0, 2}));
  spec.unknown_id.reset();
  t = make(spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a\xC3\xA9", false), (Ids{1, 2}));
}

TEST(Spm, DecodeDropsTheFirstLeadingSpaceOnly) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->decode(Ids{kSpace, kHello, kSpaceWor, kL, kD}, false), "hello world");
  EXPECT_EQ(t->decode(Ids{kSpace, kSpace, kA}, false), " a");
  EXPECT_EQ(t->decode(Ids{kBos, kSpace, kHello, kEos}, false), "<s> hello</s>");
  EXPECT_EQ(t->decode(Ids{kBos, kSpace, kHello, kEos}, true), "hello");
  EXPECT_EQ(t->decode(Ids{kSpaceWor, byte_id(0xC3), byte_id(0xA9), kTool}, true),
            "wor\xC3\xA9<tool>");
  EXPECT_EQ(t->decode(Ids{kA, -1, 100000}, true), "a");
  EXPECT_EQ(t->token_bytes(kSpaceHe), " he");
  EXPECT_EQ(t->token_bytes(byte_id(0x0A)), "\n");
  EXPECT_TRUE(t->is_special(kBos));
  EXPECT_FALSE(t->is_special(kTool));
  EXPECT_FALSE(t->is_special(byte_id(0)));
}

TEST(Spm, RoundTripsText) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  for (const char* text : {"hello world", "  lead and trail  ", "\xE4\xBD\xA0\xE5\xA5\xBD aa\n",
                           "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 x"}) {
    EXPECT_EQ(t->decode(t->encode(text, true), true), text) << text;
  }
}

// The space prefix after a literal token does not survive a round trip: llama.cpp and the legacy
// Hugging Face Llama tokenizer both decode it as a space.
TEST(Spm, LiteralTokenAddsASpaceBeforeTheNextText) {
  auto t = make(tiny_spec());
  ASSERT_TRUE(t);
  const Ids ids = t->encode("<tool> x", false);
  EXPECT_EQ(ids, (Ids{kTool, kSpace, kSpace, byte_id('x')}));
  EXPECT_EQ(t->decode(ids, false), "<tool>  x");
}

TEST(Spm, NoSpacePrefix) {
  SpmSpec spec = tiny_spec();
  spec.add_space_prefix = false;
  auto t = make(spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello", false), (Ids{kHello}));
  EXPECT_EQ(t->encode(" hello", false), (Ids{kSpace, kHello}));
  EXPECT_EQ(t->decode(Ids{kSpace, kHello}, false), " hello");
}

TEST(Spm, RejectsMalformedSpecs) {
  SpmSpec spec = tiny_spec();
  spec.tokens[byte_id(0x41)] = "<0xZZ>";
  EXPECT_FALSE(SpmTokenizer::create(spec).ok());
  spec = tiny_spec();
  spec.scores.pop_back();
  EXPECT_FALSE(SpmTokenizer::create(spec).ok());
  spec = tiny_spec();
  spec.bos_id = 100000;
  EXPECT_FALSE(SpmTokenizer::create(spec).ok());
  EXPECT_FALSE(SpmTokenizer::create(SpmSpec{}).ok());
}

// A minimal GGUF v3 writer: metadata only, no tensors.
class GgufBuilder {
 public:
  void add_string(const std::string& key, const std::string& v) {
    kv(key, 8);
    str(v);
  }
  void add_u32(const std::string& key, uint32_t v) {
    kv(key, 4);
    pod(v);
  }
  void add_bool(const std::string& key, bool v) {
    kv(key, 7);
    pod(static_cast<uint8_t>(v));
  }
  void add_strings(const std::string& key, const std::vector<std::string>& v) {
    kv(key, 9);
    pod(uint32_t{8});
    pod(uint64_t{v.size()});
    for (const auto& s : v) str(s);
  }
  void add_floats(const std::string& key, const std::vector<float>& v) {
    kv(key, 9);
    pod(uint32_t{6});
    pod(uint64_t{v.size()});
    for (float f : v) pod(f);
  }
  void add_i32s(const std::string& key, const std::vector<int32_t>& v) {
    kv(key, 9);
    pod(uint32_t{5});
    pod(uint64_t{v.size()});
    for (int32_t x : v) pod(x);
  }
  std::string bytes() const {
    std::string out = "GGUF";
    const auto put = [&](auto x) { out.append(reinterpret_cast<const char*>(&x), sizeof x); };
    put(uint32_t{3});
    put(uint64_t{0});
    put(count_);
    out += body_;
    out.resize((out.size() + 31) / 32 * 32, '\0');
    return out;
  }

 private:
  template <typename T>
  void pod(T x) {
    body_.append(reinterpret_cast<const char*>(&x), sizeof x);
  }
  void str(const std::string& s) {
    pod(uint64_t{s.size()});
    body_ += s;
  }
  void kv(const std::string& key, uint32_t type) {
    ++count_;
    str(key);
    pod(type);
  }
  std::string body_;
  uint64_t count_ = 0;
};

// GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte.
struct GgufDamage {
  bool short_scores = false;
  bool bad_type = false;
};

GgufBuilder tiny_gguf(GgufDamage damage = {}) {
  SpmSpec spec = tiny_spec();
  if (damage.short_scores) spec.scores.pop_back();
  std::vector<int32_t> types;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    switch (spec.kinds[i]) {
      case SpmTokenKind::kByte:
        types.push_back(6);
        break;
      case SpmTokenKind::kUserDefined:
        types.push_back(4);
        break;
      case SpmTokenKind::kControl:
        types.push_back(i == kUnk ? 2 : 3);
        break;
      default:
        types.push_back(1);
    }
  }
  if (damage.bad_type) types[kH] = 9;
  GgufBuilder b;
  b.add_string("tokenizer.ggml.model", "llama");
  b.add_strings("tokenizer.ggml.tokens", spec.tokens);
  b.add_floats("tokenizer.ggml.scores", spec.scores);
  b.add_i32s("tokenizer.ggml.token_type", types);
  b.add_u32("tokenizer.ggml.bos_token_id", kBos);
  b.add_u32("tokenizer.ggml.eos_token_id", kEos);
  return b;
}

Expected<std::unique_ptr<Tokenizer>> load(const std::string& bytes) {
  KASSIGN(auto gguf, GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  return load_gguf_tokenizer(*gguf);
}

TEST(SpmGguf, LoadsLlamaVocabulary) {
  const std::string bytes = tiny_gguf().bytes();
  auto t = load(bytes);
  ASSERT_TRUE(t.ok()) << t.error().message;
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.vocab_size(), kTool + 1);
  EXPECT_EQ(tok.bos_id(), kBos);
  EXPECT_EQ(tok.eos_ids(), (Ids{kEos}));
  // add_bos_token defaults to true for SentencePiece vocabularies.
  EXPECT_EQ(tok.encode("hello world", true), (Ids{kBos, kSpace, kHello, kSpaceWor, kL, kD}));
  EXPECT_EQ(tok.encode("\xC3\xA9", false), (Ids{kSpace, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(tok.decode(Ids{kBos, kSpace, kHello, kSpaceWor, kL, kD}, true), "hello world");
  EXPECT_TRUE(tok.is_special(kUnk));
}

// The same vocabulary written by gguf-py (tools/make_spm_fixture.py).
TEST(SpmGguf, LoadsFixtureWrittenByGgufPy) {
  auto gguf = GgufFile::open(test::fixtures_dir() + "/gguf/tiny_spm.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  auto t = load_gguf_tokenizer(**gguf);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->encode("hello world<tool>aaa", true),
            (Ids{kBos, kSpace, kHello, kSpaceWor, kL, kD, kTool, kSpace, kAa, kA}));
  EXPECT_EQ((*t)->encode("\xC3\xA9", false), (Ids{kSpace, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_TRUE((*t)->is_special(kUnk));
  EXPECT_FALSE((*t)->is_special(kTool));
}

TEST(SpmGguf, HonoursFlags) {
  GgufBuilder b = tiny_gguf();
  b.add_bool("tokenizer.ggml.add_bos_token", false);
  b.add_bool("tokenizer.ggml.add_eos_token", true);
  b.add_bool("tokenizer.ggml.add_space_prefix", false);
  const std::string bytes = b.bytes();
  auto t = load(bytes);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->encode("hello", true), (Ids{kHello, kEos}));
}

TEST(SpmGguf, RejectsBadMetadata) {
  std::string bytes = tiny_gguf({.short_scores = true}).bytes();
  auto t = load(bytes);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("scores"), std::string::npos) << t.error().message;
  bytes = tiny_gguf({.bad_type = true}).bytes();
  t = load(bytes);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("token_type"), std::string::npos) << t.error().message;
}

}  // namespace
}  // namespace kestrel
