// tests/tokenizer/hf_tokenizer_golden_test.cc — the Hugging Face tokenizer.json loader against
// ../shared/testdata/goldens/tokenize.jsonl, produced by the reference Rust `tokenizers` library.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using nlohmann::json;

std::string testdata() {
  return test::shared_dir() + "/testdata";
}

std::string goldens_path() {
  return testdata() + "/goldens/tokenize.jsonl";
}

std::vector<json> golden_lines(const std::string& tokenizer) {
  std::vector<json> lines;
  std::ifstream in(goldens_path());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line);
    if (j["tokenizer"] == tokenizer) lines.push_back(std::move(j));
  }
  return lines;
}

class HfGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenTest, MatchesReferenceIdsAndDecoding) {
  const std::string name = GetParam();
  const std::string dir = testdata() + "/tokenizers/" + name;
  KESTREL_SKIP_IF_ABSENT(dir + "/tokenizer.json", "the shared tokenizer");
  KESTREL_SKIP_IF_ABSENT(goldens_path(), "the shared tokenizer goldens");
  auto tok = load_hf_tokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const std::vector<json> lines = golden_lines(name);
  ASSERT_FALSE(lines.empty());
  size_t ids_ok = 0;
  size_t decoded_ok = 0;
  for (const json& g : lines) {
    const std::string text = g["text"].get<std::string>();
    const bool add = g["add_special_tokens"].get<bool>();
    const auto want = g["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = (*tok)->encode(text, add);
    if (got == want) {
      ++ids_ok;
    } else {
      ADD_FAILURE() << name << " [" << g["category"] << "] add_special_tokens=" << add
                    << " text=" << json(text).dump() << "\n want " << json(want).dump()
                    << "\n got  " << json(got).dump();
    }
    const std::string decoded = (*tok)->decode(want, false);
    if (decoded == g["decoded"].get<std::string>()) {
      ++decoded_ok;
    } else {
      ADD_FAILURE() << name << " decode of " << json(want).dump() << "\n want "
                    << g["decoded"].dump() << "\n got  "
                    << json(decoded).dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }
  std::printf("%s: ids %zu/%zu, decoded %zu/%zu\n", name.c_str(), ids_ok, lines.size(), decoded_ok,
              lines.size());
}

// Invalid UTF-8 is still encoded: the token bytes of the ids give back the input exactly.
TEST_P(HfGoldenTest, InvalidUtf8RoundTripsThroughTokenBytes) {
  const std::string name = GetParam();
  const std::string dir = testdata() + "/tokenizers/" + name;
  KESTREL_SKIP_IF_ABSENT(dir + "/tokenizer.json", "the shared tokenizer");
  auto tok = load_hf_tokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  using namespace std::string_literals;
  for (const std::string& text : {"a\xff b"s, "\xe4\xb8 x\xc3"s, "caf\xc3\xa9\x80\n\x00z"s}) {
    const std::vector<int32_t> ids = (*tok)->encode(text, false);
    std::string bytes;
    for (int32_t id : ids) bytes += (*tok)->token_bytes(id);
    EXPECT_EQ(bytes, text) << name << " ids " << json(ids).dump();
  }
}

// Encodes ~1 MB of the golden texts twice (cold, then with the word cache warm), checks both
// passes agree, and prints the load time and encode throughput.
TEST_P(HfGoldenTest, ThroughputWithWarmCacheIsConsistent) {
  const std::string name = GetParam();
  const std::string dir = testdata() + "/tokenizers/" + name;
  KESTREL_SKIP_IF_ABSENT(dir + "/tokenizer.json", "the shared tokenizer");
  KESTREL_SKIP_IF_ABSENT(goldens_path(), "the shared tokenizer goldens");
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = load_hf_tokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  size_t bytes = 0;
  const std::vector<json> lines = golden_lines(name);
  ASSERT_FALSE(lines.empty());
  while (bytes < (1u << 20)) {
    for (const json& g : lines) {
      if (g["add_special_tokens"].get<bool>()) continue;
      texts.push_back(g["text"].get<std::string>());
      bytes += texts.back().size();
    }
  }
  std::vector<std::vector<int32_t>> first;
  const auto t2 = std::chrono::steady_clock::now();
  for (const std::string& t : texts) first.push_back((*tok)->encode(t, false));
  const auto t3 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < texts.size(); ++i) ASSERT_EQ((*tok)->encode(texts[i], false), first[i]);
  const auto t4 = std::chrono::steady_clock::now();
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("%s: load %.2f s, encode %.1f MB/s first pass, %.1f MB/s second\n", name.c_str(),
              secs(t0, t1), bytes / 1e6 / secs(t2, t3), bytes / 1e6 / secs(t3, t4));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfGoldenTest,
                         ::testing::Values("qwen3", "deepseek_v3", "llama3_1", "gemma3"));

}  // namespace
}  // namespace kestrel
