// tokenizer/hf_decoder.cc — ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence.
#include "tokenizer/hf_decoder.h"

#include <array>
#include <optional>

#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/hf_pattern.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

// Inverse of the GPT-2 byte alphabet (its characters are all below U+0200).
constexpr size_t kAlphabetEnd = 512;
std::array<int16_t, kAlphabetEnd> make_unicode_to_byte() {
  std::array<int16_t, kAlphabetEnd> table;
  table.fill(-1);
  for (int b = 0; b < 256; ++b)
    table[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
  return table;
}

// A token spelled wholly in the byte alphabet stands for those bytes; any other token (an added
// token stored literally) stands for its own text.
class ByteLevelDecoder final : public HfDecoder {
 public:
  void decode(std::vector<std::string>& tokens, bool) const override {
    static const std::array<int16_t, kAlphabetEnd> to_byte = make_unicode_to_byte();
    for (std::string& t : tokens) {
      std::string bytes;
      bool spelled = true;
      for (size_t i = 0; i < t.size() && spelled;) {
        const Utf8Char c = next_utf8_char(t, i);
        spelled = c.valid && c.cp < kAlphabetEnd && to_byte[c.cp] >= 0;
        if (spelled) bytes.push_back(static_cast<char>(to_byte[c.cp]));
        i += c.length;
      }
      if (spelled) t = std::move(bytes);
    }
  }
};

class ReplaceDecoder final : public HfDecoder {
 public:
  ReplaceDecoder(HfPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens, bool) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  HfPattern pattern_;
  std::string content_;
};

// "<0xAB>" → the byte 0xAB.
std::optional<char> fallback_byte(const std::string& t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return std::nullopt;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    int d = 0;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    value = value * 16 + d;
  }
  return static_cast<char>(value);
}

// Runs of byte tokens become their text; a run that is not valid UTF-8 becomes one U+FFFD per
// byte (as the HF decoder does).
class ByteFallbackDecoder final : public HfDecoder {
 public:
  void decode(std::vector<std::string>& tokens, bool raw) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_tokens = 0;
    const auto flush = [&] {
      if (run_tokens == 0) return;
      if (raw || valid_utf8_prefix(run) == run.size()) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\uFFFD");
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& t : tokens) {
      if (const auto b = fallback_byte(t)) {
        run.push_back(*b);
        ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder final : public HfDecoder {
 public:
  void decode(std::vector<std::string>& tokens, bool) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content` from every token.
class StripDecoder final : public HfDecoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens, bool raw) const override {
    if (content_.empty()) return;
    for (std::string& t : tokens) {
      for (size_t i = 0; i < start_ && !raw && t.starts_with(content_); ++i)
        t.erase(0, content_.size());
      for (size_t i = 0; i < stop_ && t.ends_with(content_); ++i)
        t.resize(t.size() - content_.size());
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

// The replacement character spells a space, except in the first token, where the HF decoder
// drops it (it was prepended by the pre-tokenizer) unless the scheme never prepends.
class MetaspaceDecoder final : public HfDecoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : pattern_(HfPattern::literal(std::move(replacement))), strip_first_(strip_first) {}
  void decode(std::vector<std::string>& tokens, bool raw) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && strip_first_ && !raw;
      tokens[i] = pattern_.replace_all(tokens[i], drop ? "" : " ");
    }
  }

 private:
  HfPattern pattern_;
  bool strip_first_;
};

class SequenceDecoder final : public HfDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<HfDecoder>> steps)
      : steps_(std::move(steps)) {}
  void decode(std::vector<std::string>& tokens, bool raw) const override {
    for (const auto& step : steps_) step->decode(tokens, raw);
  }

 private:
  std::vector<std::unique_ptr<HfDecoder>> steps_;
};

Expected<std::unique_ptr<HfDecoder>> parse_one(const nlohmann::json& j, const std::string& type) {
  if (type == "ByteLevel") return std::unique_ptr<HfDecoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<HfDecoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<HfDecoder>(new FuseDecoder());
  if (type == "Replace") {
    KASSIGN(HfPattern pattern, HfPattern::parse(j.at("pattern")));
    return std::unique_ptr<HfDecoder>(
        new ReplaceDecoder(std::move(pattern), j.at("content").get<std::string>()));
  }
  if (type == "Strip") {
    return std::unique_ptr<HfDecoder>(new StripDecoder(j.at("content").get<std::string>(),
                                                       j.value("start", 0u), j.value("stop", 0u)));
  }
  if (type == "Metaspace") {
    bool strip_first = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme"))
      strip_first = j["prepend_scheme"].get<std::string>() != "never";
    return std::unique_ptr<HfDecoder>(
        new MetaspaceDecoder(j.value("replacement", std::string("\u2581")), strip_first));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<HfDecoder>> steps;
    for (const auto& step : j.at("decoders")) {
      KASSIGN(auto d, parse_hf_decoder(step));
      if (d) steps.push_back(std::move(d));
    }
    return std::unique_ptr<HfDecoder>(new SequenceDecoder(std::move(steps)));
  }
  return make_error("unsupported tokenizer.json decoder type '{}'", type);
}

}  // namespace

Expected<std::unique_ptr<HfDecoder>> parse_hf_decoder(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<HfDecoder>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error("tokenizer.json decoder has no type: {}", j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  try {
    return parse_one(j, type);
  } catch (const nlohmann::json::exception& e) {
    return make_error("tokenizer.json decoder {}: {}", type, e.what());
  }
}

}  // namespace kestrel
