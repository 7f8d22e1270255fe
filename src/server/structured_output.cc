#include "server/structured_output.h"

#include <limits>
#include <vector>

#include "structured/matcher.h"

namespace kestrel::server {
namespace {

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const structured::Grammar> grammar,
                    std::shared_ptr<const structured::TokenTrie> trie)
      : matcher_(std::move(grammar), std::move(trie)) {}

  void mask(std::span<float> logits) override {
    matcher_.fill_mask(bits_);
    // Ids past the tokenizer's vocabulary (padding rows of the LM head) are never allowed.
    for (size_t i = 0; i < logits.size(); ++i) {
      const size_t word = i / 64;
      if (word >= bits_.size() || ((bits_[word] >> (i % 64)) & 1u) == 0)
        logits[i] = -std::numeric_limits<float>::infinity();
    }
  }

  void accept(int32_t token) override { matcher_.accept(token); }

 private:
  structured::Matcher matcher_;
  std::vector<uint64_t> bits_;
};

}  // namespace

Expected<std::shared_ptr<const structured::Grammar>> response_format_grammar(
    const ResponseFormat& format) {
  if (format.type == "json_object") return structured::json_object_grammar();
  if (format.type != "json_schema")
    return make_error("response_format '{}' is not supported yet", format.type);
  const nlohmann::json& spec = format.spec.at("json_schema");
  if (!spec.is_object() || !spec.contains("schema") || !spec["schema"].is_object())
    return make_error("response_format.json_schema.schema must be a JSON Schema object");
  return structured::compile_json_schema(spec["schema"]);
}

std::shared_ptr<TokenConstraint> grammar_constraint(
    std::shared_ptr<const structured::Grammar> grammar,
    std::shared_ptr<const structured::TokenTrie> trie) {
  return std::make_shared<GrammarConstraint>(std::move(grammar), std::move(trie));
}

}  // namespace kestrel::server
