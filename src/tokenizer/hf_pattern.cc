// tokenizer/hf_pattern.cc — literal and regex patterns of tokenizer.json.
#include "tokenizer/hf_pattern.h"

namespace kestrel {
namespace {

// Unicode White_Space, which is what \s means to the Rust regex crate. PCRE2's \s also takes
// U+180E (it follows Perl's \h), so tokenizer.json patterns spell \s out.
constexpr std::string_view kWhiteSpaceRanges =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

}  // namespace

std::string rust_regex_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out +=
            in_class ? std::string(kWhiteSpaceRanges) : "[" + std::string(kWhiteSpaceRanges) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceRanges) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Expected<HfPattern> HfPattern::parse(const nlohmann::json& j) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return literal(j["String"].get<std::string>());
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    HfPattern p;
    KASSIGN(Regex regex, Regex::create(rust_regex_to_pcre2(j["Regex"].get<std::string>())));
    p.regex_ = std::move(regex);
    return p;
  }
  return make_error("tokenizer.json pattern is neither {{\"String\"}} nor {{\"Regex\"}}: {}",
                    j.dump());
}

HfPattern HfPattern::literal(std::string text) {
  HfPattern p;
  p.literal_ = std::move(text);
  return p;
}

void HfPattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  for (size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size())) {
    out.emplace_back(pos, pos + literal_.size());
  }
}

std::string HfPattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(text, matches);
  std::string out;
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(pos, begin - pos));
    out.append(content);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace kestrel
