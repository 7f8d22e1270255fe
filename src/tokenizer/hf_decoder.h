// tokenizer/hf_decoder.h — the "decoder" of tokenizer.json: turning token strings back into text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel {

class HfDecoder {
 public:
  virtual ~HfDecoder() = default;
  // Rewrites the token strings in place (a step may fuse them into fewer). `raw` asks for the
  // bytes one token stands for on its own: byte-fallback bytes are kept even when they are not
  // valid UTF-8, and nothing is stripped at the start.
  virtual void decode(std::vector<std::string>& tokens, bool raw) const = 0;
};

// Null JSON gives a null decoder (token strings are concatenated as they are).
Expected<std::unique_ptr<HfDecoder>> parse_hf_decoder(const nlohmann::json& j);

}  // namespace kestrel
