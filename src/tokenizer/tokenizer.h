// tokenizer/tokenizer.h — text ↔ token ids. One interface for every vocabulary kind; loaders
// build the right implementation from a model file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kestrel {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Special and user-defined tokens written in the text (e.g. "<|im_start|>") become single
  // tokens. add_special_tokens adds the BOS/EOS tokens the vocabulary asks for. Any bytes are
  // accepted; invalid UTF-8 is encoded byte by byte, and bytes the vocabulary has no token for
  // are dropped (as transformers does).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  // The concatenated bytes of the tokens (may end inside a UTF-8 sequence); ids outside the
  // vocabulary contribute nothing. skip_special_tokens drops control tokens.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  // The raw bytes one token stands for; empty for ids outside the vocabulary.
  virtual std::string token_bytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // Tokens that end generation; the first is the EOS token added by add_special_tokens.
  virtual const std::vector<int32_t>& eos_ids() const = 0;
  // Control tokens (chat markers, BOS/EOS, ...): true exactly for those decode can skip.
  virtual bool is_special(int32_t id) const = 0;
};

// Builds the tokenizer a GGUF file describes (tokenizer.ggml.* metadata).
Expected<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const GgufFile& gguf);

// Builds the tokenizer of a Hugging Face model directory: tokenizer.json, with
// tokenizer_config.json (bos/eos/pad, add_bos_token/add_eos_token, added-token flags) when present.
Expected<std::unique_ptr<Tokenizer>> load_hf_tokenizer(const std::string& dir);

// A directory with tokenizer.json, or a .gguf file.
Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);

}  // namespace kestrel
