// Gemma3-270M's own GGUF vocabulary (SentencePiece-style, tokenizer.ggml.model "llama") against
// llama.cpp's tokenization of the golden prompts (tools/make_gemma3_goldens.py), and against the
// Hugging Face tokenizer of the same model in ../shared/testdata/tokenizers/gemma3.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

nlohmann::json prompts() {
  auto text = read_text_file(test::fixtures_dir() + "/gemma3_270m/llamacpp_greedy.json");
  EXPECT_TRUE(text.ok());
  return text.ok() ? nlohmann::json::parse(*text).at("prompts") : nlohmann::json::array();
}

TEST(Gemma3GgufTokenizer, EncodesAsLlamaCppAndDecodesBack) {
  KESTREL_SKIP_IF_ABSENT(test::gemma3_model_path(), "Gemma3-270M (scripts/fetch-gemma3.sh)");
  auto tok = load_tokenizer(test::gemma3_model_path());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const nlohmann::json ps = prompts();
  ASSERT_FALSE(ps.empty());
  for (const auto& p : ps) {
    const std::string text = p.at("text").get<std::string>();
    const auto want = p.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->encode(text, true), want) << text;
    // The prompt without its BOS decodes to the text (special tokens kept).
    EXPECT_EQ((*tok)->decode(std::span<const int32_t>(want).subspan(1), false), text);
  }
  EXPECT_EQ((*tok)->bos_id(), 2);
  ASSERT_FALSE((*tok)->eos_ids().empty());
  EXPECT_EQ((*tok)->eos_ids()[0], 1);
}

TEST(Gemma3GgufTokenizer, AgreesWithTheHuggingFaceTokenizer) {
  KESTREL_SKIP_IF_ABSENT(test::gemma3_model_path(), "Gemma3-270M (scripts/fetch-gemma3.sh)");
  const std::string hf_dir = test::shared_dir() + "/testdata/tokenizers/gemma3";
  KESTREL_SKIP_IF_ABSENT(hf_dir + "/tokenizer.json", "the Gemma3 tokenizer in ../shared");
  auto gguf = load_tokenizer(test::gemma3_model_path());
  auto hf = load_tokenizer(hf_dir);
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  ASSERT_TRUE(hf.ok()) << hf.error().message;
  for (const auto& p : prompts()) {
    const std::string text = p.at("text").get<std::string>();
    EXPECT_EQ((*gguf)->encode(text, true), (*hf)->encode(text, true)) << text;
  }
  for (const char* text :
       {"  two leading spaces", "tabs\tand\nnewlines\n\n", "naïve café 東京 🙂",
        "<start_of_turn>user\nhi<end_of_turn>", "x<0x41>y", ""})
    EXPECT_EQ((*gguf)->encode(text, false), (*hf)->encode(text, false)) << text;
}

}  // namespace
}  // namespace kestrel
