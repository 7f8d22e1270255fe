// libFuzzer target: tokenizer encode/decode and the streaming detokenizer on arbitrary bytes.
// Tokenizers: $KESTREL_FUZZ_TOKENIZER (a .gguf file or tokenizer.json directory) if set, else
// tests/fixtures/gguf/tiny_spm.gguf (run from the repository root) and the default model when
// scripts/fetch-default-model.sh has placed it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8_sequence.h"

namespace {

std::vector<std::unique_ptr<kestrel::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<kestrel::Tokenizer>> list;
  return list;
}

std::vector<std::string> tokenizer_paths() {
  if (const char* p = std::getenv("KESTREL_FUZZ_TOKENIZER")) return {p};
  std::vector<std::string> paths = {"tests/fixtures/gguf/tiny_spm.gguf"};
  std::string models;
  if (const char* m = std::getenv("KESTREL_MODELS")) {
    models = m;
  } else if (const char* h = std::getenv("HOME")) {
    models = std::string(h) + "/.cache/kestrel/models";
  }
  const std::string smollm = models + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(smollm)) paths.push_back(smollm);
  return paths;
}

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
  __builtin_trap();
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const kestrel::Utf8Sequence seq = kestrel::utf8_sequence(s.substr(i));
    if (seq.kind != kestrel::Utf8Sequence::kValid) return false;
    i += seq.length;
  }
  return true;
}

void stream(const kestrel::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  kestrel::IncrementalDetokenizer detok(tok, skip);
  for (int32_t id : ids) check(valid_utf8(detok.push(id)), "a delta is not valid UTF-8");
  check(valid_utf8(detok.finish()), "the final delta is not valid UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const std::string& path : tokenizer_paths()) {
    auto tok = kestrel::load_tokenizer(path);
    if (!tok.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s\n", tok.error().message.c_str());
      std::exit(1);
    }
    tokenizers().push_back(std::move(*tok));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The same bytes read as little-endian 16-bit ids, a few of them out of range or negative.
  std::vector<int32_t> raw_ids;
  for (size_t i = 0; i + 1 < size; i += 2) {
    raw_ids.push_back(static_cast<int16_t>(data[i] | data[i + 1] << 8));
  }
  for (const auto& tok : tokenizers()) {
    for (bool add_special : {false, true}) {
      const std::vector<int32_t> ids = tok->encode(text, add_special);
      for (int32_t id : ids) check(id >= 0 && id < tok->vocab_size(), "id outside vocabulary");
      (void)tok->decode(ids, false);
      stream(*tok, ids, add_special);
    }
    for (bool skip : {false, true}) {
      (void)tok->decode(raw_ids, skip);
      stream(*tok, raw_ids, skip);
    }
  }
  return 0;
}
