// tokenizer/hf_pre_tokenizer.cc — Split (all delimiter behaviours, invert), ByteLevel,
// Metaspace, Digits and Sequence.
#include "tokenizer/hf_pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/hf_pattern.h"
#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

// The HF delimiter behaviours, over the alternating match / non-match segments of a piece.
std::vector<Segment> apply_behavior(const std::vector<Segment>& segs, Behavior behavior) {
  std::vector<Segment> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Segment& s : segs) {
        if (!s.is_match) out.push_back(s);
      }
      break;
    case Behavior::kIsolated:
      out = segs;
      break;
    case Behavior::kMergedWithPrevious:
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case Behavior::kContiguous:
      for (const Segment& s : segs) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
  }
  return out;
}

void split_by_pattern(const HfPattern& pattern, Behavior behavior, bool invert,
                      const HfPiece& piece, std::vector<HfPiece>& out) {
  std::vector<std::pair<size_t, size_t>> matches;
  pattern.find_all(piece.text, matches);
  std::vector<Segment> segs;
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > pos) segs.push_back({pos, begin, invert});
    segs.push_back({begin, end, !invert});
    pos = end;
  }
  if (pos < piece.text.size()) segs.push_back({pos, piece.text.size(), invert});
  for (const Segment& s : apply_behavior(segs, behavior)) {
    if (s.end == s.begin) continue;
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

class SplitPreTokenizer final : public HfPreTokenizer {
 public:
  SplitPreTokenizer(HfPattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(const HfPiece& piece, std::vector<HfPiece>& out) const override {
    split_by_pattern(pattern_, behavior_, invert_, piece, out);
  }

 private:
  HfPattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// Spells every byte in the GPT-2 byte alphabet, optionally after the GPT-2 regex split.
class ByteLevelPreTokenizer final : public HfPreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<HfPattern> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void split(const HfPiece& piece, std::vector<HfPiece>& out) const override {
    HfPiece p = piece;
    if (add_prefix_space_ && !p.text.starts_with(' ')) p.text.insert(0, " ");
    std::vector<HfPiece> pieces;
    if (regex_) {
      split_by_pattern(*regex_, Behavior::kIsolated, false, p, pieces);
    } else {
      pieces.push_back(std::move(p));
    }
    for (HfPiece& q : pieces) {
      std::string spelled;
      spelled.reserve(q.text.size() * 2);
      for (char c : q.text) append_utf8(spelled, byte_to_unicode(static_cast<uint8_t>(c)));
      out.push_back({std::move(spelled), q.at_start});
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<HfPattern> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// Spaces become the replacement character (▁), a leading one is prepended per the scheme, and
// with `split` every ▁ starts a new piece.
class MetaspacePreTokenizer final : public HfPreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        pattern_(HfPattern::literal(replacement_)) {}
  void split(const HfPiece& piece, std::vector<HfPiece>& out) const override {
    HfPiece p{HfPattern::literal(" ").replace_all(piece.text, replacement_), piece.at_start};
    const bool prepend =
        scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
    if (prepend && !p.text.starts_with(replacement_)) p.text.insert(0, replacement_);
    if (split_) {
      split_by_pattern(pattern_, Behavior::kMergedWithNext, false, p, out);
    } else if (!p.text.empty()) {
      out.push_back(std::move(p));
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  HfPattern pattern_;
};

class SequencePreTokenizer final : public HfPreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<HfPreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(const HfPiece& piece, std::vector<HfPiece>& out) const override {
    std::vector<HfPiece> pieces = {piece};
    std::vector<HfPiece> next;
    for (const auto& step : steps_) {
      next.clear();
      for (const HfPiece& p : pieces) step->split(p, next);
      pieces.swap(next);
    }
    for (HfPiece& p : pieces) {
      if (!p.text.empty()) out.push_back(std::move(p));
    }
  }

 private:
  std::vector<std::unique_ptr<HfPreTokenizer>> steps_;
};

Expected<Behavior> parse_behavior(const std::string& name) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return make_error("unknown Split behavior '{}'", name);
}

Expected<std::unique_ptr<HfPreTokenizer>> parse_one(const nlohmann::json& j,
                                                    const std::string& type) {
  if (type == "Split") {
    KASSIGN(HfPattern pattern, HfPattern::parse(j.at("pattern")));
    KASSIGN(Behavior behavior, parse_behavior(j.at("behavior").get<std::string>()));
    return std::unique_ptr<HfPreTokenizer>(
        new SplitPreTokenizer(std::move(pattern), behavior, j.value("invert", false)));
  }
  if (type == "ByteLevel") {
    std::optional<HfPattern> regex;
    if (j.value("use_regex", true)) {
      KASSIGN(regex, HfPattern::parse(nlohmann::json{{"Regex", std::string(kGpt2SplitPattern)}}));
    }
    return std::unique_ptr<HfPreTokenizer>(
        new ByteLevelPreTokenizer(j.value("add_prefix_space", false), std::move(regex)));
  }
  if (type == "Metaspace") {
    PrependScheme scheme =
        j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    if (j.contains("prepend_scheme")) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return make_error("unknown Metaspace prepend_scheme '{}'", s);
      }
    }
    return std::unique_ptr<HfPreTokenizer>(new MetaspacePreTokenizer(
        j.value("replacement", std::string("\u2581")), scheme, j.value("split", true)));
  }
  if (type == "Digits") {
    // Isolated single digits, or runs of digits (Contiguous over single-digit matches).
    const bool individual = j.value("individual_digits", false);
    KASSIGN(HfPattern pattern,
            HfPattern::parse(nlohmann::json{{"Regex", individual ? "\\p{N}" : "\\p{N}+"}}));
    return std::unique_ptr<HfPreTokenizer>(
        new SplitPreTokenizer(std::move(pattern), Behavior::kIsolated, false));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<HfPreTokenizer>> steps;
    for (const auto& step : j.at("pretokenizers")) {
      KASSIGN(auto p, parse_hf_pre_tokenizer(step));
      if (p) steps.push_back(std::move(p));
    }
    return std::unique_ptr<HfPreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  return make_error("unsupported tokenizer.json pre_tokenizer type '{}'", type);
}

}  // namespace

Expected<std::unique_ptr<HfPreTokenizer>> parse_hf_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<HfPreTokenizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return make_error("tokenizer.json pre_tokenizer has no type: {}", j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  try {
    return parse_one(j, type);
  } catch (const nlohmann::json::exception& e) {
    return make_error("tokenizer.json pre_tokenizer {}: {}", type, e.what());
  }
}

std::vector<HfPiece> hf_pre_tokenize(const HfPreTokenizer* pre, HfPiece piece) {
  std::vector<HfPiece> out;
  if (piece.text.empty()) return out;
  if (pre == nullptr) {
    out.push_back(std::move(piece));
  } else {
    pre->split(piece, out);
  }
  return out;
}

}  // namespace kestrel
