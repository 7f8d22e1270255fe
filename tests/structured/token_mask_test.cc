// The token mask over real vocabularies: random walks that only ever pick allowed tokens end in
// documents that parse and satisfy the schema (checked by an independent validator below), the
// mask never empties before the end, and it equals a brute-force check of every token.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "structured/matcher.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::structured {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// ---- An independent validator for the supported subset of JSON Schema. ----

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (const char ch : s) n += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
  return n;
}

bool type_matches(const std::string& type, const json& v) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

// Generation writes only listed properties, so extra keys are an error whenever properties
// are listed.
bool validate(const ojson& schema, const json& v, const ojson& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    return validate(root.at(ojson::json_pointer(schema["$ref"].get<std::string>().substr(1))), v,
                    root);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    bool any = false;
    for (const ojson& alt : schema[key]) any = any || validate(alt, v, root);
    if (!any) return false;
  }
  if (schema.contains("allOf")) {
    for (const ojson& alt : schema["allOf"]) {
      if (!validate(alt, v, root)) return false;
    }
  }
  if (schema.contains("const") && json::parse(schema["const"].dump()) != v) return false;
  if (schema.contains("enum")) {
    bool found = false;
    for (const ojson& e : schema["enum"]) found = found || json::parse(e.dump()) == v;
    if (!found) return false;
  }
  if (schema.contains("type")) {
    const ojson& t = schema["type"];
    bool ok = false;
    if (t.is_string()) ok = type_matches(t.get<std::string>(), v);
    for (const ojson& x : t.is_array() ? t : ojson::array()) {
      ok = ok || type_matches(x.get<std::string>(), v);
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    const bool listed = schema.contains("properties");
    for (const auto& [key, value] : v.items()) {
      if (listed) {
        if (!schema["properties"].contains(key)) return false;
        if (!validate(schema["properties"][key], value, root)) return false;
      } else if (schema.contains("additionalProperties") &&
                 !validate(schema["additionalProperties"], value, root)) {
        return false;
      }
    }
    for (const ojson& r : schema.value("required", ojson::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
  }
  if (v.is_array()) {
    if (v.size() < schema.value("minItems", size_t{0})) return false;
    if (v.size() > schema.value("maxItems", SIZE_MAX)) return false;
    for (const json& item : v) {
      if (schema.contains("items") && !validate(schema["items"], item, root)) return false;
    }
  }
  if (v.is_string()) {
    const size_t n = code_points(v.get<std::string>());
    if (n < schema.value("minLength", size_t{0}) || n > schema.value("maxLength", SIZE_MAX)) {
      return false;
    }
  }
  return true;
}

TEST(Validator, CatchesViolations) {
  const ojson s = ojson::parse(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string", "maxLength": 2},
      "c": {"type": "array", "items": {"enum": [1, "x"]}, "minItems": 1}}, "required": ["a"]})");
  EXPECT_TRUE(validate(s, json::parse(R"({"a": 1, "b": "\u00e9e", "c": [1, "x"]})"), s));
  EXPECT_FALSE(validate(s, json::parse(R"({"b": "x"})"), s));
  EXPECT_FALSE(validate(s, json::parse(R"({"a": 1.5})"), s));
  EXPECT_FALSE(validate(s, json::parse(R"({"a": 1, "b": "abc"})"), s));
  EXPECT_FALSE(validate(s, json::parse(R"({"a": 1, "c": []})"), s));
  EXPECT_FALSE(validate(s, json::parse(R"({"a": 1, "c": [2]})"), s));
  EXPECT_FALSE(validate(s, json::parse(R"({"a": 1, "d": 2})"), s));
}

// ---- Walks. ----

bool has_bit(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[id / 64] >> (id % 64)) & 1;
}

std::vector<int32_t> allowed_ids(const std::vector<uint64_t>& bits, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    if (has_bit(bits, id)) ids.push_back(id);
  }
  return ids;
}

bool is_eos(const TokenTrie& trie, int32_t id) {
  for (const int32_t e : trie.eos_ids()) {
    if (e == id) return true;
  }
  return false;
}

// Every token tried on its own: the definition the walk must match.
std::vector<uint64_t> brute_force_mask(const Matcher& m, const TokenTrie& trie) {
  std::vector<uint64_t> bits((trie.vocab_size() + 63) / 64, 0);
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    bool ok = false;
    if (is_eos(trie, id)) {
      ok = m.accepting();
    } else if (!trie.bytes(id).empty()) {
      ByteMatcher copy = m.byte_matcher();
      ok = copy.feed(trie.bytes(id));
    }
    if (ok) bits[id / 64] |= uint64_t{1} << (id % 64);
  }
  return bits;
}

// The tokens on which two masks disagree (empty when equal), for failure messages.
std::string mask_diff(const std::vector<uint64_t>& got, const std::vector<uint64_t>& want,
                      const TokenTrie& trie) {
  std::string out;
  int shown = 0;
  for (int32_t id = 0; id < trie.vocab_size() && shown < 10; ++id) {
    if (has_bit(got, id) == has_bit(want, id)) continue;
    out += fmt::format("{} {:?} {}; ", id, std::string(trie.bytes(id)),
                       has_bit(got, id) ? "allowed wrongly" : "missing");
    ++shown;
  }
  return out;
}

struct WalkOptions {
  int finish_after = 40;  // tokens picked uniformly before steering towards the end
  int max_tokens = 3000;
  int brute_force_every = 0;  // compare with brute force every n-th step (0: never)
};

struct Walk {
  std::string text;
  bool complete = false;
  int tokens = 0;
  int brute_force_checks = 0;
};

// Picks allowed tokens at random until the document is complete. After finish_after tokens it
// prefers EOS, then tokens holding a closing byte, which drives any document to an end.
Walk random_walk(const std::shared_ptr<const Grammar>& g,
                 const std::shared_ptr<const TokenTrie>& trie, std::mt19937& rng,
                 const WalkOptions& opt) {
  Walk walk;
  Matcher m(g, trie);
  std::vector<uint64_t> bits;
  for (int step = 0; step < opt.max_tokens; ++step) {
    m.fill_mask(bits);
    if (opt.brute_force_every > 0 && step % opt.brute_force_every == 0) {
      EXPECT_EQ(mask_diff(bits, brute_force_mask(m, *trie), *trie), "") << "after: " << walk.text;
      ++walk.brute_force_checks;
    }
    const std::vector<int32_t> allowed = allowed_ids(bits, trie->vocab_size());
    if (allowed.empty()) {
      ADD_FAILURE() << "empty mask after: " << walk.text;
      return walk;
    }
    if (m.done()) {
      for (const int32_t id : allowed) EXPECT_TRUE(is_eos(*trie, id)) << walk.text;
      walk.complete = true;
      return walk;
    }
    std::vector<int32_t> preferred;
    if (step >= opt.finish_after) {
      for (const int32_t id : allowed) {
        if (is_eos(*trie, id)) {
          preferred = {id};
          break;
        }
        if (trie->bytes(id).find_first_of("\"}]") != std::string_view::npos) {
          preferred.push_back(id);
        }
      }
    }
    const std::vector<int32_t>& pool = preferred.empty() ? allowed : preferred;
    const int32_t id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    EXPECT_TRUE(m.accept(id));
    ++walk.tokens;
    if (is_eos(*trie, id)) {
      EXPECT_TRUE(m.done());
      walk.complete = true;
      return walk;
    }
    walk.text += trie->bytes(id);
  }
  return walk;
}

void check_walks(const ojson& schema, const std::shared_ptr<const Grammar>& g,
                 const std::shared_ptr<const TokenTrie>& trie, int trials, uint32_t seed,
                 const WalkOptions& opt, bool root_object) {
  std::mt19937 rng(seed);
  int total_tokens = 0;
  for (int t = 0; t < trials; ++t) {
    const Walk walk = random_walk(g, trie, rng, opt);
    ASSERT_TRUE(walk.complete) << "no end after " << walk.tokens << " tokens: " << walk.text;
    total_tokens += walk.tokens;
    const json doc = json::parse(walk.text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << walk.text;
    if (root_object) {
      EXPECT_TRUE(doc.is_object()) << walk.text;
    }
    EXPECT_TRUE(validate(schema, doc, schema)) << walk.text;
    if (t < 2) std::printf("  sample: %s\n", walk.text.c_str());
  }
  std::printf("  %d walks, %.1f tokens on average\n", trials,
              static_cast<double>(total_tokens) / trials);
}

const char* const kSchemas[] = {
    // A typical record.
    R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "minItems": 1,
                 "maxItems": 3},
        "active": {"type": "boolean"}, "score": {"type": "number"}},
        "required": ["name", "tags"]})",
    // References, const, nullable union.
    R"({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"},
        "y": {"type": "number"}}, "required": ["x", "y"]}},
        "type": "object", "properties": {"kind": {"const": "line"},
        "from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"},
        "label": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 5},
                            {"type": "null"}]}},
        "required": ["kind", "from", "to", "label"]})",
    // A tool call (tool_choice naming a function).
    R"({"type": "object", "properties": {"name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
        "required": ["city"]}}, "required": ["name", "arguments"]})",
    // Recursion and a map.
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
        "attrs": {"type": "object", "additionalProperties": {"type": ["string", "null"]}}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})",
    // Top-level non-object values.
    R"({"anyOf": [{"type": "array", "items": {"type": "number"}, "maxItems": 4},
                  {"enum": ["yes", "no", 1, 10, 100]}]})",
};

// ---- A tiny vocabulary: every state of every walk checked against brute force. ----

std::shared_ptr<const TokenTrie> tiny_trie() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t :
       {"{\"",         "\":",           "\",\"",  "\"}",    "ab",      "abc",     " \"",
        "\n  ",        "true",          "null",   "12",     ".5",      "\xC3",    "\xA9x",
        "\xC3\xA9",    "\\u00",         "nam",    "name",   "\":\"",   "},{",     "]}",
        "[{",          "e\"",           "\"a\"",  "\"bb\"", "\"ccc\"", "[\"",     "\"]",
        "\"]}",        "\"line\"",      "\"x\":", "1,",     "0}",      "\": {\"", "\"kids\":[",
        "get_weather", "\"celsius\"}}", "fahren", "\n",     "  ",      "yes"}) {
    tokens.emplace_back(t);
  }
  tokens.emplace_back("<eos>");
  const auto eos = static_cast<int32_t>(tokens.size() - 1);
  return TokenTrie::build(std::move(tokens), {eos});
}

TEST(TokenMask, TinyVocabularyMatchesBruteForceEverywhere) {
  const auto trie = tiny_trie();
  uint32_t seed = 1;
  for (const char* text : kSchemas) {
    const ojson schema = ojson::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << g.error().message;
    WalkOptions opt;
    opt.brute_force_every = 1;
    opt.finish_after = 60;
    check_walks(schema, *g, trie, 30, seed++, opt, false);
  }
  WalkOptions opt;
  opt.brute_force_every = 1;
  check_walks(ojson::object(), json_object_grammar(), trie, 30, 99, opt, true);
}

// ---- Real tokenizers. ----

std::string qwen3_dir() {
  return test::shared_dir() + "/testdata/tokenizers/qwen3";
}

struct Vocab {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const TokenTrie> trie;
  std::string error;  // why the tokenizer did not load
};

const Vocab& qwen3() {
  static const Vocab v = [] {
    Vocab x;
    auto t = load_tokenizer(qwen3_dir());
    if (!t.ok()) {
      x.error = t.error().message;
      return x;
    }
    x.tokenizer = std::shared_ptr<const Tokenizer>(std::move(t).value());
    x.trie = TokenTrie::build(*x.tokenizer);
    return x;
  }();
  return v;
}

TEST(TokenMask, TrieHoldsTheVocabulary) {
  KESTREL_SKIP_IF_ABSENT(qwen3_dir(), "the shared qwen3 tokenizer");
  const Vocab& v = qwen3();
  ASSERT_TRUE(v.trie) << v.error;
  EXPECT_EQ(v.trie->vocab_size(), v.tokenizer->vocab_size());
  ASSERT_FALSE(v.trie->eos_ids().empty());
  // Every regular token is reachable in the full trie by its bytes, and only special tokens
  // are left out.
  const ByteTrie& all = v.trie->all();
  size_t regular = 0;
  for (int32_t id = 0; id < v.tokenizer->vocab_size(); ++id) {
    regular += !v.tokenizer->is_special(id) && !v.tokenizer->token_bytes(id).empty();
  }
  EXPECT_EQ(all.ids.size(), regular);
  for (const ByteTrie::Node& node : all.nodes) {
    for (int32_t k = node.ids_begin; k < node.ids_end; ++k) {
      EXPECT_EQ(static_cast<int32_t>(v.trie->bytes(all.ids[k]).size()), node.depth);
    }
  }
  EXPECT_EQ(v.trie->non_plain().ids.size() + v.trie->plain_by_chars().size(), all.ids.size());
}

TEST(TokenMask, RandomWalksOnQwen3ProduceValidDocuments) {
  KESTREL_SKIP_IF_ABSENT(qwen3_dir(), "the shared qwen3 tokenizer");
  const Vocab& v = qwen3();
  ASSERT_TRUE(v.trie) << v.error;
  uint32_t seed = 7;
  for (const char* text : kSchemas) {
    const ojson schema = ojson::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << g.error().message;
    check_walks(schema, *g, v.trie, 50, seed++, WalkOptions{}, false);
  }
  check_walks(ojson::object(), json_object_grammar(), v.trie, 50, 123, WalkOptions{}, true);
}

TEST(TokenMask, Qwen3MaskEqualsBruteForce) {
  KESTREL_SKIP_IF_ABSENT(qwen3_dir(), "the shared qwen3 tokenizer");
  const Vocab& v = qwen3();
  ASSERT_TRUE(v.trie) << v.error;
  WalkOptions opt;
  opt.brute_force_every = 7;
  opt.finish_after = 20;
  int checks = 0;
  std::mt19937 rng(5);
  for (const char* text : {kSchemas[0], kSchemas[1]}) {
    const ojson schema = ojson::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok());
    for (int t = 0; t < 2; ++t) checks += random_walk(*g, v.trie, rng, opt).brute_force_checks;
  }
  for (int t = 0; t < 2; ++t) {
    checks += random_walk(json_object_grammar(), v.trie, rng, opt).brute_force_checks;
  }
  EXPECT_GE(checks, 12);
}

}  // namespace
}  // namespace kestrel::structured
