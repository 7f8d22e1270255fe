// tokenizer/hf_bpe_model.h — the BPE "model" of tokenizer.json: one pre-tokenized word in, token
// ids out. Works on characters of the word (byte-level vocabularies see the GPT-2 byte alphabet,
// SentencePiece-style ones see ▁ and real characters, with <0xAB> byte fallback).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tokenizer/bpe_merge.h"
#include "tokenizer/string_hash.h"

namespace kestrel {

class HfBpeModel {
 public:
  // `j` is the "model" object; only type "BPE" is supported.
  static Expected<std::unique_ptr<HfBpeModel>> parse(const nlohmann::json& j);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  std::optional<int32_t> find(std::string_view token) const;
  // Every (token, id) of the model vocabulary, for building the id → token table.
  template <typename F>
  void for_each_token(F&& f) const {
    for (const auto& [token, id] : vocab_) f(token, id);
  }

 private:
  template <typename V>
  using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  StringMap<int32_t> vocab_;
  BpeMergeMap merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  // Words repeat a lot in real text; their results are kept (bounded, cleared when full).
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace kestrel
