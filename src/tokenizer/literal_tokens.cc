#include "tokenizer/literal_tokens.h"

#include <algorithm>

namespace kestrel {

void LiteralTokens::add(int32_t id, std::string_view text) {
  if (text.empty()) return;
  by_first_byte_[static_cast<unsigned char>(text[0])].emplace_back(std::string(text), id);
}

void LiteralTokens::finish() {
  for (auto& group : by_first_byte_) {
    std::stable_sort(group.begin(), group.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
}

size_t LiteralTokens::match(std::string_view text, size_t pos, int32_t* id) const {
  for (const auto& [literal, candidate] : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    if (text.substr(pos).starts_with(literal)) {
      *id = candidate;
      return literal.size();
    }
  }
  return 0;
}

}  // namespace kestrel
