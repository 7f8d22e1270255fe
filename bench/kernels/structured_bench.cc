// Matcher::fill_mask over the real Qwen3 vocabulary (151k tokens) for regex, EBNF and JSON
// Schema grammars: per mask while decoding a whole document, and the first mask of a fresh
// matcher (nothing cached); and TokenTrie::build, once per vocabulary, on Qwen3 and on the default
// model's. The vocabularies come from $KESTREL_SHARED/testdata/tokenizers/qwen3 (default:
// ../shared beside the checkout) and $KESTREL_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf (default:
// ~/.cache/kestrel/models, scripts/fetch-default-model.sh).
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "structured/ebnf.h"
#include "structured/grammar.h"
#include "structured/matcher.h"
#include "structured/regex.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::structured {
namespace {

constexpr const char* kJsonEbnf = R"g(
root    ::= value
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws      ::= [ \t\n]*
)g";

struct Vocab {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const TokenTrie> trie;
};

std::shared_ptr<const Tokenizer> load(const std::string& path) {
  auto t = load_tokenizer(path);
  if (!t.ok()) return nullptr;
  return std::shared_ptr<const Tokenizer>(std::move(t).value());
}

std::string qwen3_dir() {
  const char* shared = std::getenv("KESTREL_SHARED");
  return (shared != nullptr ? std::string(shared)
                            : std::string(KESTREL_SOURCE_DIR) + "/../shared") +
         "/testdata/tokenizers/qwen3";
}

std::string default_model_path() {
  const char* models = std::getenv("KESTREL_MODELS");
  const char* home = std::getenv("HOME");
  return (models != nullptr ? std::string(models)
                            : std::string(home != nullptr ? home : "") + "/.cache/kestrel/models") +
         "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const Vocab& qwen3() {
  static const Vocab v = [] {
    Vocab x;
    x.tokenizer = load(qwen3_dir());
    if (x.tokenizer) x.trie = TokenTrie::build(*x.tokenizer);
    return x;
  }();
  return v;
}

struct Scenario {
  const char* name;
  std::shared_ptr<const Grammar> (*grammar)();
  const char* text;  // a document the grammar accepts
};

std::shared_ptr<const Grammar> lowercase() {
  static const auto g = compile_regex("[a-z ]{0,200}").value();
  return g;
}
std::shared_ptr<const Grammar> phone() {
  static const auto g = compile_regex("\\(\\d{3}\\) \\d{3}-\\d{4}").value();
  return g;
}
std::shared_ptr<const Grammar> json_ebnf() {
  static const auto g = compile_ebnf(kJsonEbnf).value();
  return g;
}
// A typical record schema: bounded strings, an enum array, optional properties.
std::shared_ptr<const Grammar> record_schema() {
  static const auto g = compile_json_schema(nlohmann::ordered_json::parse(R"({
      "type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "minItems": 1,
                 "maxItems": 3},
        "active": {"type": "boolean"}, "score": {"type": "number"}},
      "required": ["name", "tags"]})"))
                            .value();
  return g;
}

constexpr const char* kDocument =
    R"({"name": "Bob Smith", "age": 42, "tags": ["a", "b"], "note": "a longer string to write"})";

const Scenario kScenarios[] = {
    {"regex [a-z ]{0,200}", lowercase, "the quick brown fox jumps over the lazy dog and runs"},
    {"regex phone", phone, "(555) 123-4567"},
    {"EBNF JSON", json_ebnf, kDocument},
    {"JSON Schema object", json_object_grammar, kDocument},
    {"JSON Schema record", record_schema,
     R"({"name": "Bob Smith", "age": 42, "email": "bob@example.com", "tags": ["a", "ccc"],)"
     R"( "active": true, "score": 0.5})"},
};

// Decoding one document: a mask before every token, as the runner asks for them.
void BM_DecodeMasks(benchmark::State& state) {
  const Vocab& v = qwen3();
  if (!v.trie) {
    state.SkipWithError("qwen3 tokenizer not found (set KESTREL_SHARED)");
    return;
  }
  const Scenario& sc = kScenarios[state.range(0)];
  const std::vector<int32_t> tokens = v.tokenizer->encode(sc.text, false);
  std::vector<uint64_t> bits;
  for (auto _ : state) {
    Matcher m(sc.grammar(), v.trie);
    for (const int32_t id : tokens) {
      m.fill_mask(bits);
      if (!m.accept(id)) {
        state.SkipWithError("document refused");
        return;
      }
    }
    benchmark::DoNotOptimize(bits.data());
  }
  state.SetLabel(sc.name);
  state.counters["per_mask"] = benchmark::Counter(
      static_cast<double>(tokens.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The first mask of a fresh matcher after a prefix: nothing cached yet.
void BM_FirstMask(benchmark::State& state) {
  const Vocab& v = qwen3();
  if (!v.trie) {
    state.SkipWithError("qwen3 tokenizer not found (set KESTREL_SHARED)");
    return;
  }
  const Scenario& sc = kScenarios[state.range(0)];
  const std::string_view text = sc.text;
  const std::vector<int32_t> prefix =
      v.tokenizer->encode(std::string(text.substr(0, text.size() / 2)), false);
  std::vector<uint64_t> bits;
  for (auto _ : state) {
    state.PauseTiming();
    Matcher m(sc.grammar(), v.trie);
    for (const int32_t id : prefix) m.accept(id);
    state.ResumeTiming();
    m.fill_mask(bits);
    benchmark::DoNotOptimize(bits.data());
  }
  int64_t allowed = 0;
  for (const uint64_t w : bits) allowed += __builtin_popcountll(w);
  state.SetLabel(
      fmt::format("{} after {:?}", sc.name, std::string(text.substr(0, text.size() / 2))));
  state.counters["allowed"] = static_cast<double>(allowed);
}

// TokenTrie::build over a whole vocabulary, the one-time cost per tokenizer: 0 = Qwen3 (151k
// tokens), 1 = the default model (SmolLM2-135M, 49k).
void BM_TrieBuild(benchmark::State& state) {
  static const std::shared_ptr<const Tokenizer> vocabs[2] = {qwen3().tokenizer,
                                                             load(default_model_path())};
  const std::shared_ptr<const Tokenizer>& tok = vocabs[state.range(0)];
  if (!tok) {
    state.SkipWithError(state.range(0) == 0
                            ? "qwen3 tokenizer not found (set KESTREL_SHARED)"
                            : "default model not found (scripts/fetch-default-model.sh)");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(TokenTrie::build(*tok));
  state.SetLabel(fmt::format("{} ({} tokens)", state.range(0) == 0 ? "Qwen3" : "SmolLM2-135M",
                             tok->vocab_size()));
}

BENCHMARK(BM_DecodeMasks)
    ->DenseRange(0, static_cast<int>(std::size(kScenarios)) - 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FirstMask)
    ->DenseRange(0, static_cast<int>(std::size(kScenarios)) - 1)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TrieBuild)->DenseRange(0, 1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kestrel::structured

BENCHMARK_MAIN();
