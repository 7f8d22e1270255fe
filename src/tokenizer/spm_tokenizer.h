// tokenizer/spm_tokenizer.h — SentencePiece-style BPE over characters, driven by token scores
// (Llama 1/2, Mistral, Gemma GGUF vocabularies): literal special tokens, spaces spelled "▁", then
// repeated merges of the best-scoring adjacent pair, with <0xXX> byte tokens as the fallback.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/literal_tokens.h"
#include "tokenizer/string_hash.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

enum class SpmTokenKind : uint8_t {
  kNormal,       // takes part in merges; "▁" stands for a space
  kControl,      // matched literally in text, dropped by decode(skip_special_tokens)
  kUserDefined,  // matched literally in text, kept by decode
  kByte,         // "<0xXX>": the fallback for a byte no merge covers
  kUnused,       // never produced by encode; decoded like a normal token
};

struct SpmSpec {
  std::vector<std::string> tokens;  // index = token id
  std::vector<float> scores;        // one per token, or empty for all zero
  std::vector<SpmTokenKind> kinds;  // one per token, or empty for all normal
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;       // the first is the EOS that add_eos appends
  std::optional<int32_t> unknown_id;  // stands for a character no token or byte token covers
  bool add_bos = true;
  bool add_eos = false;
  // Text gets a leading space (at the start and after each literal token), and decode drops
  // the first space of its output again.
  bool add_space_prefix = true;
};

class SpmTokenizer final : public Tokenizer {
 public:
  static Expected<std::unique_ptr<SpmTokenizer>> create(SpmSpec spec);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  // Follows Hugging Face's decoder chain: the pieces are joined, then one leading space is
  // removed when add_space_prefix is on.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool is_special(int32_t id) const override;

 private:
  SpmTokenizer() = default;
  Status build(SpmSpec& spec);
  bool valid_id(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < bytes_.size(); }
  void encode_fragment(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
  void emit_symbol(std::string_view symbol, std::vector<int32_t>& out) const;

  std::vector<std::string> bytes_;  // per id: the raw bytes it stands for
  std::vector<SpmTokenKind> kinds_;
  std::vector<float> scores_;
  // Normal tokens by their spelling ("▁" for spaces).
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> normal_ids_;
  std::array<int32_t, 256> byte_ids_{};  // -1 where the vocabulary has no <0xXX> token
  // Control and user-defined tokens, matched in the text before the merges.
  LiteralTokens literals_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  std::optional<int32_t> unknown_id_;
  bool add_bos_ = true;
  bool add_eos_ = false;
  bool add_space_prefix_ = true;
};

}  // namespace kestrel
