// The default model's GGUF tokenizer round-trips the shared tokenizer corpus: decode(encode(s))
// == s for every text whose bytes the byte-level vocabulary can represent.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bitset>
#include <sstream>
#include <string>

#include "base/mmap_file.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

TEST(GgufRoundTrip, DefaultModelOnSharedCorpus) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model");
  auto tok = load_tokenizer(model);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  // Bytes with a single-byte token; a byte-level BPE can spell exactly these.
  std::bitset<256> spellable;
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    const std::string b = (*tok)->token_bytes(id);
    if (b.size() == 1 && !(*tok)->is_special(id)) spellable.set(static_cast<unsigned char>(b[0]));
  }
  const std::string corpus_path = test::shared_dir() + "/testdata/goldens/tokenize.jsonl";
  KESTREL_SKIP_IF_ABSENT(corpus_path, "the shared tokenizer corpus");
  auto corpus = read_text_file(corpus_path);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message;
  std::istringstream lines(*corpus);
  int checked = 0, unspellable = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string text = nlohmann::json::parse(line)["text"].get<std::string>();
    bool ok = true;
    for (unsigned char c : text) ok = ok && spellable.test(c);
    if (!ok) {
      ++unspellable;
      continue;
    }
    const auto ids = (*tok)->encode(text, /*add_special_tokens=*/false);
    EXPECT_EQ((*tok)->decode(ids, /*skip_special_tokens=*/false), text);
    ++checked;
  }
  std::printf("[gguf round trip] %d texts checked, %d with bytes the vocabulary lacks\n", checked,
              unspellable);
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace kestrel
