// tests/engine/output_processor_fixture.h — what the OutputProcessor tests share: UTF-8
// checks, the fixture over the real Qwen3 tokenizer that feeds one token per core output, and
// stop-string options.
#pragma once

#include "engine/output_processor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "test_paths.h"

namespace kestrel::output_test {

using Ids = std::vector<int32_t>;

// Well-formed UTF-8 by code-point arithmetic (no overlongs, surrogates or values past U+10FFFF).
inline bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const size_t n = b0 < 0x80 ? 1 : b0 >> 5 == 6 ? 2 : b0 >> 4 == 14 ? 3 : b0 >> 3 == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

inline bool is_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// `s` cut to at most `n` bytes without splitting a character.
inline std::string floor_chars(const std::string& s, size_t n) {
  if (n >= s.size()) return s;
  while (n > 0 && is_continuation(s[n])) --n;
  return s.substr(0, n);
}

// A prefix of valid UTF-8 bytes without a trailing incomplete character.
inline std::string complete_chars(const std::string& s) {
  size_t lead = s.size();
  while (lead > 0 && is_continuation(s[lead - 1])) --lead;
  if (lead == 0) return {};
  const auto b0 = static_cast<unsigned char>(s[lead - 1]);
  const size_t need = b0 < 0x80 ? 1 : b0 >> 5 == 6 ? 2 : b0 >> 4 == 14 ? 3 : 4;
  return s.size() - (lead - 1) < need ? s.substr(0, lead - 1) : s;
}

// The engine client's OutputProcessors, one per request handle: a finished output drops its
// processor, and unknown handles give nothing.
class Processors {
 public:
  explicit Processors(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  Status add_request(RequestHandle id, std::span<const int32_t> prompt,
                     const OutputOptions& options, int64_t min_tokens) {
    if (requests_.count(id) != 0) return make_error("request {} is already in use", id);
    KASSIGN(auto p, OutputProcessor::start(tokenizer_, prompt, options, min_tokens));
    requests_.emplace(id, std::move(p));
    return {};
  }
  std::optional<RequestOutput> process(EngineCoreOutput&& in, bool* abort_in_core) {
    *abort_in_core = false;
    const auto it = requests_.find(in.id);
    if (it == requests_.end()) return std::nullopt;
    RequestOutput out = it->second->process(std::move(in), abort_in_core);
    if (out.finished()) requests_.erase(it);
    return out;
  }
  void remove(RequestHandle id) { requests_.erase(id); }
  size_t num_requests() const { return requests_.size(); }

 private:
  const Tokenizer* tokenizer_;
  std::map<RequestHandle, std::unique_ptr<OutputProcessor>> requests_;
};

struct Fed {
  std::optional<RequestOutput> out;
  bool abort = true;  // process() must always write it
};

class OutputProcessorTest : public ::testing::Test {
 protected:
  static std::string tokenizer_dir() { return test::shared_dir() + "/testdata/tokenizers/qwen3"; }
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(tokenizer_dir())) return;  // SetUp skips or fails
    auto tok = load_tokenizer(tokenizer_dir());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tokenizer_ = std::move(*tok).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(tokenizer_dir(), "the shared qwen3 tokenizer");
    ASSERT_NE(tokenizer_, nullptr) << "the shared qwen3 tokenizer is present but did not load";
  }

  static const Tokenizer& tok() { return *tokenizer_; }
  static Ids encode(std::string_view text) { return tokenizer_->encode(text, false); }
  static std::string decode(const Ids& ids, bool skip_special = true) {
    return tokenizer_->decode(ids, skip_special);
  }
  static int32_t single_token(std::string_view text) {
    const Ids ids = encode(text);
    EXPECT_EQ(ids.size(), 1u) << "'" << text << "' is not one token";
    return ids.empty() ? -1 : ids[0];
  }

  static Fed feed(Processors& p, RequestHandle id, Ids tokens, int64_t count,
                  std::optional<FinishReason> finish = {}, std::optional<int32_t> stop_id = {}) {
    EngineCoreOutput in;
    in.id = id;
    in.new_token_ids = std::move(tokens);
    in.finish_reason = finish;
    in.stop_token_id = stop_id;
    in.num_output_tokens = count;
    Fed f;
    f.out = p.process(std::move(in), &f.abort);
    return f;
  }

  // Feeds `ids` one per output; the last carries `finish`. Stops after the first finished output.
  static std::vector<Fed> stream(Processors& p, RequestHandle id, const Ids& ids,
                                 std::optional<FinishReason> finish = FinishReason::kLength,
                                 std::optional<int32_t> stop_id = {}) {
    std::vector<Fed> fed;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool last = i + 1 == ids.size();
      fed.push_back(feed(p, id, {ids[i]}, static_cast<int64_t>(i + 1), last ? finish : std::nullopt,
                         last ? stop_id : std::nullopt));
      if (!fed.back().out || fed.back().out->finished()) break;
    }
    return fed;
  }

  static std::string joined(const std::vector<Fed>& fed) {
    std::string s;
    for (const Fed& f : fed) {
      if (f.out) s += f.out->text;
    }
    return s;
  }

  static Processors processor() { return Processors(tokenizer_); }

  static inline const Tokenizer* tokenizer_ = nullptr;
};

inline OutputOptions with_stops(std::vector<std::string> stop, bool include = false) {
  OutputOptions o;
  o.stop = std::move(stop);
  o.include_stop_str_in_output = include;
  return o;
}

const char* const kTexts[] = {
    "The quick brown fox jumps over the lazy dog.",
    // zh + ja
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81 "
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0",
    // Family ZWJ sequence, thumbs up with skin tone, a flag, then Korean.
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 ok "
    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5 "
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
    "  tabs\t\nand caf\xC3\xA9 \xE2\x82\xAC"
    "5 \xF0\x9F\x98\x80\xF0\x9F\x98\x80!",
};

}  // namespace kestrel::output_test
