// tokenizer/gguf_tokenizer.cc — the tokenizer a GGUF file describes in its tokenizer.ggml.* keys.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "base/logging.h"
#include "formats/gguf.h"
#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

// GGUF token types (llama.cpp's numbering).
enum GgufTokenType : int64_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct PreTokenizerInfo {
  std::vector<std::string> patterns;
  bool llama3_family = false;  // ignores merges for whole-token pieces and adds BOS by default
};

bool one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

// tokenizer.ggml.pre → split regexes, following the groups llama.cpp assigns to each name.
PreTokenizerInfo pre_tokenizer_for(const std::optional<std::string>& pre) {
  const std::string gpt2(kGpt2SplitPattern);
  if (pre && one_of(*pre, {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"})) {
    return {{std::string(kDigitSplitPattern), gpt2}};
  }
  if (pre && one_of(*pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx",
                           "smaug-bpe"})) {
    return {{std::string(kLlama3SplitPattern)}, true};
  }
  if (pre && one_of(*pre, {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"})) {
    return {{std::string(kQwen2SplitPattern)}};
  }
  if (pre && one_of(*pre, {"gpt2", "gpt-2", "default", "mpt", "olmo", "phi-2"})) return {{gpt2}};
  KLOG_WARN("unknown tokenizer.ggml.pre '{}'; splitting text like GPT-2, which may differ",
            pre.value_or("(missing)"));
  return {{gpt2}};
}

Expected<TokenKind> token_kind(int64_t type, size_t id) {
  switch (type) {
    case kUndefined:
    case kNormal:
    case kUnused:
    case kByte:
      return TokenKind::kNormal;
    case kUnknown:
    case kControl:
      return TokenKind::kControl;
    case kUserDefined:
      return TokenKind::kUserDefined;
    default:
      return make_error("token {} has invalid tokenizer.ggml.token_type {}", id, type);
  }
}

Expected<std::optional<int32_t>> token_id(const GgufFile& gguf, const std::string& key,
                                          size_t vocab) {
  const std::optional<int64_t> id = gguf.get_int(key);
  if (!id) return std::optional<int32_t>();
  if (*id < 0 || static_cast<uint64_t>(*id) >= vocab) {
    return make_error("{} = {} is outside the vocabulary of {} tokens", key, *id, vocab);
  }
  return std::optional<int32_t>(static_cast<int32_t>(*id));
}

Expected<SpmTokenKind> spm_kind(int64_t type, size_t id) {
  switch (type) {
    case kUndefined:
    case kNormal:
      return SpmTokenKind::kNormal;
    case kUnknown:
    case kControl:
      return SpmTokenKind::kControl;
    case kUserDefined:
      return SpmTokenKind::kUserDefined;
    case kUnused:
      return SpmTokenKind::kUnused;
    case kByte:
      return SpmTokenKind::kByte;
    default:
      return make_error("token {} has invalid tokenizer.ggml.token_type {}", id, type);
  }
}

// A special token id from its key, or llama.cpp's SentencePiece default when the key is absent.
Expected<std::optional<int32_t>> spm_token_id(const GgufFile& gguf, const std::string& key,
                                              int32_t fallback, size_t vocab) {
  if (gguf.find(key)) return token_id(gguf, key, vocab);
  if (static_cast<size_t>(fallback) >= vocab) return std::optional<int32_t>();
  return std::optional<int32_t>(fallback);
}

Expected<std::unique_ptr<Tokenizer>> load_spm(const GgufFile& gguf) {
  SpmSpec spec;
  auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return make_error("GGUF has no tokenizer.ggml.tokens string array");
  spec.tokens = std::move(*tokens);
  const size_t vocab = spec.tokens.size();

  if (gguf.find("tokenizer.ggml.scores")) {
    const auto scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (!scores || scores->size() != vocab) {
      return make_error("tokenizer.ggml.scores must be {} numbers, one per token", vocab);
    }
    spec.scores.assign(scores->begin(), scores->end());
  }
  if (gguf.find("tokenizer.ggml.token_type")) {
    const auto types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (!types || types->size() != vocab) {
      return make_error("tokenizer.ggml.token_type must be {} integers, one per token", vocab);
    }
    spec.kinds.reserve(vocab);
    for (size_t id = 0; id < vocab; ++id) {
      KASSIGN(const SpmTokenKind kind, spm_kind((*types)[id], id));
      spec.kinds.push_back(kind);
    }
  }

  KASSIGN(spec.bos_id, spm_token_id(gguf, "tokenizer.ggml.bos_token_id", 1, vocab));
  KASSIGN(spec.unknown_id, spm_token_id(gguf, "tokenizer.ggml.unknown_token_id", 0, vocab));
  KASSIGN(const std::optional<int32_t> eos,
          spm_token_id(gguf, "tokenizer.ggml.eos_token_id", 2, vocab));
  if (eos) spec.eos_ids.push_back(*eos);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    KASSIGN(const std::optional<int32_t> id, token_id(gguf, key, vocab));
    if (id && std::find(spec.eos_ids.begin(), spec.eos_ids.end(), *id) == spec.eos_ids.end()) {
      spec.eos_ids.push_back(*id);
    }
  }
  spec.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  spec.add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  spec.add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);

  KASSIGN(std::unique_ptr<SpmTokenizer> spm, SpmTokenizer::create(std::move(spec)));
  return std::unique_ptr<Tokenizer>(std::move(spm));
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const GgufFile& gguf) {
  const std::optional<std::string> model = gguf.get_string("tokenizer.ggml.model");
  if (!model) return make_error("GGUF has no tokenizer.ggml.model");
  if (*model == "llama") return load_spm(gguf);
  if (*model != "gpt2") return make_error("unsupported tokenizer.ggml.model '{}'", *model);

  ByteLevelBpeSpec spec;
  auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return make_error("GGUF has no tokenizer.ggml.tokens string array");
  spec.tokens = std::move(*tokens);
  const size_t vocab = spec.tokens.size();

  if (gguf.find("tokenizer.ggml.token_type")) {
    const auto types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (!types || types->size() != vocab) {
      return make_error("tokenizer.ggml.token_type must be {} integers, one per token", vocab);
    }
    spec.kinds.reserve(vocab);
    for (size_t id = 0; id < vocab; ++id) {
      KASSIGN(const TokenKind kind, token_kind((*types)[id], id));
      spec.kinds.push_back(kind);
    }
  }

  auto merges = gguf.get_string_array("tokenizer.ggml.merges");
  if (!merges) return make_error("GGUF BPE tokenizer has no tokenizer.ggml.merges string array");
  spec.merges = std::move(*merges);

  PreTokenizerInfo pre = pre_tokenizer_for(gguf.get_string("tokenizer.ggml.pre"));
  spec.split_patterns = std::move(pre.patterns);
  spec.ignore_merges = pre.llama3_family;

  KASSIGN(spec.bos_id, token_id(gguf, "tokenizer.ggml.bos_token_id", vocab));
  // EOS first (add_eos appends it), then the other end-of-generation markers.
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    KASSIGN(const std::optional<int32_t> id, token_id(gguf, key, vocab));
    if (id && std::find(spec.eos_ids.begin(), spec.eos_ids.end(), *id) == spec.eos_ids.end()) {
      spec.eos_ids.push_back(*id);
    }
  }
  spec.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(pre.llama3_family);
  spec.add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token").value_or(false);

  KASSIGN(std::unique_ptr<ByteLevelBpe> bpe, ByteLevelBpe::create(std::move(spec)));
  return std::unique_ptr<Tokenizer>(std::move(bpe));
}

}  // namespace kestrel
