#include "server/structured_output.h"

#include <optional>
#include <vector>

#include "structured/choice.h"
#include "structured/ebnf.h"
#include "structured/matcher.h"
#include "structured/regex.h"

namespace kestrel::server {
namespace {

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const structured::Grammar> grammar,
                    std::shared_ptr<const structured::TokenTrie> trie)
      : matcher_(std::move(grammar), std::move(trie)) {}

  // Ids past the tokenizer's vocabulary (padding rows of the LM head) have no bit: never allowed.
  void fill_bitmask(std::vector<uint64_t>& bits) override { matcher_.fill_mask(bits); }

  bool accept(int32_t token) override { return matcher_.accept(token); }
  bool complete() const override { return matcher_.done() || matcher_.accepting(); }
  bool can_restore() const override { return true; }
  void save() override { saved_ = matcher_.checkpoint(); }
  void restore() override {
    if (saved_) matcher_.restore(*saved_);
  }

 private:
  structured::Matcher matcher_;
  std::optional<structured::Matcher::Checkpoint> saved_;
};

}  // namespace

namespace {

// disable_any_whitespace: the same JSON grammar without whitespace between tokens.
std::shared_ptr<const structured::Grammar> compact(std::shared_ptr<const structured::Grammar> g) {
  auto out = std::make_shared<structured::Grammar>(*g);
  out->json_whitespace = false;
  return out;
}

}  // namespace

Expected<std::shared_ptr<const structured::Grammar>> output_constraint_grammar(
    const OutputConstraint& c) {
  using Kind = OutputConstraint::Kind;
  switch (c.kind) {
    case Kind::kJsonObject:
      return c.any_whitespace ? structured::json_object_grammar()
                              : compact(structured::json_object_grammar());
    case Kind::kJsonSchema: {
      KASSIGN(auto g, structured::compile_json_schema(c.schema));
      return c.any_whitespace ? g : compact(std::move(g));
    }
    case Kind::kRegex:
      return structured::compile_regex(c.text);
    case Kind::kChoice:
      return structured::choice_grammar(c.choices);
    case Kind::kGrammar:
      if (structured::looks_like_lark(c.text))
        return make_error(
            "Lark grammars are not supported; write the grammar in EBNF (GBNF) form, starting "
            "with a rule `root ::= ...`");
      return structured::compile_ebnf(c.text);
  }
  return make_error("unknown output constraint");
}

std::shared_ptr<TokenConstraint> grammar_constraint(
    std::shared_ptr<const structured::Grammar> grammar,
    std::shared_ptr<const structured::TokenTrie> trie) {
  return std::make_shared<GrammarConstraint>(std::move(grammar), std::move(trie));
}

}  // namespace kestrel::server
