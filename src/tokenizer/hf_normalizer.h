// tokenizer/hf_normalizer.h — the "normalizer" of tokenizer.json: text rewrites applied before
// pre-tokenization (and before matching added tokens flagged "normalized").
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel {

class HfNormalizer {
 public:
  virtual ~HfNormalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// Null JSON gives a null normalizer (the text is used as it is).
Expected<std::unique_ptr<HfNormalizer>> parse_hf_normalizer(const nlohmann::json& j);

}  // namespace kestrel
