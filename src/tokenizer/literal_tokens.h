// tokenizer/literal_tokens.h — tokens matched verbatim in the text before any model runs
// (control and user-defined tokens of GGUF vocabularies): the longest match at a position wins.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel {

class LiteralTokens {
 public:
  // Empty texts are ignored. Call finish() after the last add().
  void add(int32_t id, std::string_view text);
  // Orders each first-byte group longest first (ties keep insertion order).
  void finish();
  // The length of the literal token at `pos` (setting *id), or 0 when none starts there.
  size_t match(std::string_view text, size_t pos, int32_t* id) const;

 private:
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_byte_;
};

}  // namespace kestrel
