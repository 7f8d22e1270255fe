// tokenizer/byte_level_bpe.h — byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM families): literal
// special tokens, regex pre-tokenization, then merges by rank over the bytes of each piece.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_merge.h"
#include "tokenizer/literal_tokens.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/string_hash.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

enum class TokenKind : uint8_t {
  kNormal,       // produced by BPE; spelled in the GPT-2 byte alphabet
  kControl,      // special: matched literally in text, dropped by decode(skip_special_tokens)
  kUserDefined,  // matched literally in text, kept by decode
};

struct ByteLevelBpeSpec {
  // Index = token id. Normal tokens are spelled in the GPT-2 byte alphabet ("Ġthe" = " the");
  // control and user-defined tokens are literal text.
  std::vector<std::string> tokens;
  std::vector<TokenKind> kinds;     // one per token, or empty for all normal
  std::vector<std::string> merges;  // "left right" in byte-alphabet spelling, best first
  std::vector<std::string> split_patterns = {std::string(kGpt2SplitPattern)};
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole (Llama 3)
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;  // the first is the EOS that add_eos appends
  bool add_bos = false;
  bool add_eos = false;
};

// The GPT-2 byte alphabet: the printable character that spells each byte in a vocabulary.
char32_t byte_to_unicode(uint8_t byte);

class ByteLevelBpe final : public Tokenizer {
 public:
  static Expected<std::unique_ptr<ByteLevelBpe>> create(ByteLevelBpeSpec spec);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool is_special(int32_t id) const override;

 private:
  template <typename V>
  using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

  explicit ByteLevelBpe(RegexSplitter splitter) : splitter_(std::move(splitter)) {}
  Status build(ByteLevelBpeSpec& spec);
  Status build_merges(const std::vector<std::string>& merges);
  bool valid_id(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < bytes_.size(); }
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void apply_merges(std::string_view piece, std::vector<int32_t>& out) const;

  RegexSplitter splitter_;
  std::vector<std::string> bytes_;  // per id: the raw bytes it stands for
  std::vector<TokenKind> kinds_;
  StringMap<int32_t> normal_ids_;        // raw bytes → id, normal tokens only
  std::array<int32_t, 256> byte_ids_{};  // -1 where the vocabulary has no token for the byte
  BpeMergeMap merges_;
  // Control and user-defined tokens, matched in the text before BPE.
  LiteralTokens literals_;
  bool ignore_merges_ = false;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  bool add_bos_ = false;
  bool add_eos_ = false;

  // Pieces repeat a lot in real text; their BPE results are kept (bounded, cleared when full).
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace kestrel
