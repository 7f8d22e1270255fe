// Matcher::fill_mask over the real Qwen3 vocabulary (151k tokens) for regex, EBNF and JSON
// Schema grammars: per mask while decoding a whole document, and the first mask of a fresh
// matcher (nothing cached). The vocabulary comes from
// $KESTREL_SHARED/testdata/tokenizers/qwen3 (default: ../shared beside the checkout).
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "structured/ebnf.h"
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

const Vocab& qwen3() {
  static const Vocab v = [] {
    const char* shared = std::getenv("KESTREL_SHARED");
    const std::string dir =
        (shared != nullptr ? std::string(shared) : std::string(KESTREL_SOURCE_DIR) + "/../shared") +
        "/testdata/tokenizers/qwen3";
    Vocab x;
    auto t = load_tokenizer(dir);
    if (!t.ok()) return x;
    x.tokenizer = std::shared_ptr<const Tokenizer>(std::move(t).value());
    x.trie = TokenTrie::build(*x.tokenizer);
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

constexpr const char* kDocument =
    R"({"name": "Bob Smith", "age": 42, "tags": ["a", "b"], "note": "a longer string to write"})";

const Scenario kScenarios[] = {
    {"regex [a-z ]{0,200}", lowercase, "the quick brown fox jumps over the lazy dog and runs"},
    {"regex phone", phone, "(555) 123-4567"},
    {"EBNF JSON", json_ebnf, kDocument},
    {"JSON Schema object", json_object_grammar, kDocument},
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

BENCHMARK(BM_DecodeMasks)
    ->DenseRange(0, static_cast<int>(std::size(kScenarios)) - 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FirstMask)
    ->DenseRange(0, static_cast<int>(std::size(kScenarios)) - 1)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kestrel::structured

BENCHMARK_MAIN();
