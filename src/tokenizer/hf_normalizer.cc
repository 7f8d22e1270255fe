// tokenizer/hf_normalizer.cc — NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip and
// Sequence.
#include "tokenizer/hf_normalizer.h"

#include <vector>

#include "tokenizer/hf_pattern.h"
#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

class UnicodeNormalizer final : public HfNormalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(std::string_view text) const override {
    return kestrel::normalize(text, form_);
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public HfNormalizer {
 public:
  std::string normalize(std::string_view text) const override { return to_lowercase(text); }
};

class ReplaceNormalizer final : public HfNormalizer {
 public:
  ReplaceNormalizer(HfPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    return pattern_.replace_all(text, content_);
  }

 private:
  HfPattern pattern_;
  std::string content_;
};

class PrependNormalizer final : public HfNormalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class StripNormalizer final : public HfNormalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    size_t begin = 0;
    size_t end = text.size();
    if (left_) {
      while (begin < end) {
        const Utf8Char c = next_utf8_char(text, begin);
        if (!c.valid || !is_white_space(c.cp)) break;
        begin += c.length;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        const Utf8Char c = next_utf8_char(text, start);
        if (!c.valid || start + c.length != end || !is_white_space(c.cp)) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer final : public HfNormalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<HfNormalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<HfNormalizer>> steps_;
};

}  // namespace

Expected<std::unique_ptr<HfNormalizer>> parse_hf_normalizer(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<HfNormalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error("tokenizer.json normalizer has no type: {}", j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  try {
    if (type == "NFC")
      return std::unique_ptr<HfNormalizer>(new UnicodeNormalizer(NormalForm::kNfc));
    if (type == "NFD")
      return std::unique_ptr<HfNormalizer>(new UnicodeNormalizer(NormalForm::kNfd));
    if (type == "NFKC")
      return std::unique_ptr<HfNormalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
    if (type == "NFKD")
      return std::unique_ptr<HfNormalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
    if (type == "Lowercase") return std::unique_ptr<HfNormalizer>(new LowercaseNormalizer());
    if (type == "Replace") {
      KASSIGN(HfPattern pattern, HfPattern::parse(j.at("pattern")));
      return std::unique_ptr<HfNormalizer>(
          new ReplaceNormalizer(std::move(pattern), j.at("content").get<std::string>()));
    }
    if (type == "Prepend") {
      return std::unique_ptr<HfNormalizer>(
          new PrependNormalizer(j.at("prepend").get<std::string>()));
    }
    if (type == "Strip") {
      return std::unique_ptr<HfNormalizer>(
          new StripNormalizer(j.value("strip_left", false), j.value("strip_right", false)));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<HfNormalizer>> steps;
      for (const auto& step : j.at("normalizers")) {
        KASSIGN(auto n, parse_hf_normalizer(step));
        if (n) steps.push_back(std::move(n));
      }
      return std::unique_ptr<HfNormalizer>(new SequenceNormalizer(std::move(steps)));
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error("tokenizer.json normalizer {}: {}", type, e.what());
  }
  return make_error("unsupported tokenizer.json normalizer type '{}'", type);
}

}  // namespace kestrel
