// tokenizer/hf_pre_tokenizer.h — the "pre_tokenizer" of tokenizer.json: splitting normalized
// text into the words the model encodes one by one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel {

struct HfPiece {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the whole input (Metaspace "first")
};

class HfPreTokenizer {
 public:
  virtual ~HfPreTokenizer() = default;
  // Appends the pieces `piece` splits into (empty pieces are dropped).
  virtual void split(const HfPiece& piece, std::vector<HfPiece>& out) const = 0;
};

// Null JSON gives a null pre-tokenizer (the text is one word).
Expected<std::unique_ptr<HfPreTokenizer>> parse_hf_pre_tokenizer(const nlohmann::json& j);

// Applies `pre` (may be null) to `piece`.
std::vector<HfPiece> hf_pre_tokenize(const HfPreTokenizer* pre, HfPiece piece);

}  // namespace kestrel
