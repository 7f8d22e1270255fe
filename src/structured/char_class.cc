#include "structured/char_class.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace kestrel::structured {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

// The parts of `ranges` inside [lo, hi], shifted down by `base`.
CodeRanges slice(const CodeRanges& ranges, uint32_t lo, uint32_t hi, uint32_t base) {
  CodeRanges out;
  for (const auto& [a, b] : ranges) {
    if (b < lo || a > hi) continue;
    out.emplace_back(std::max(a, lo) - base, std::min(b, hi) - base);
  }
  return out;
}

// A state is the set of code points still possible, relative to the smallest value the bytes
// read so far allow, and the continuation bytes still due. States with the same future are
// merged by keying on both.
class AutomatonBuilder {
 public:
  CharClass build(CodeRanges ranges) {
    out_.ranges = std::move(ranges);
    out_.next.assign(256, kClassReject);
    for (uint32_t b = 0; b < 0x80; ++b) {
      if (!slice(out_.ranges, b, b, 0).empty()) out_.next[b] = kClassDone;
    }
    // Lead bytes: sequence length, payload bits, and the code points that length may encode
    // (no overlong forms, nothing above U+10FFFF).
    struct Lead {
      uint32_t first, last;
      int continuation;
      uint32_t mask, min, max;
    };
    const Lead leads[] = {{0xC2, 0xDF, 1, 0x1F, 0x80, 0x7FF},
                          {0xE0, 0xEF, 2, 0x0F, 0x800, 0xFFFF},
                          {0xF0, 0xF4, 3, 0x07, 0x10000, kMaxCodePoint}};
    for (const Lead& lead : leads) {
      for (uint32_t b = lead.first; b <= lead.last; ++b) {
        const uint32_t base = (b & lead.mask) << (6 * lead.continuation);
        const uint32_t top = base + (1u << (6 * lead.continuation)) - 1;
        CodeRanges rel =
            slice(out_.ranges, std::max(base, lead.min), std::min(top, lead.max), base);
        if (!rel.empty()) out_.next[b] = state(lead.continuation, std::move(rel));
      }
    }
    return std::move(out_);
  }

 private:
  int32_t state(int continuation, CodeRanges rel) {
    auto key = std::make_pair(continuation, rel);
    if (auto it = ids_.find(key); it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(out_.next.size() / 256);
    ids_.emplace(std::move(key), id);
    out_.next.resize(out_.next.size() + 256, kClassReject);
    const int shift = 6 * (continuation - 1);
    for (uint32_t c = 0x80; c <= 0xBF; ++c) {
      const uint32_t lo = (c - 0x80) << shift;
      CodeRanges sub = slice(rel, lo, lo + (1u << shift) - 1, lo);
      if (sub.empty()) continue;
      const int32_t to = continuation == 1 ? kClassDone : state(continuation - 1, std::move(sub));
      out_.next[static_cast<size_t>(id) * 256 + c] = to;
    }
    return id;
  }

  CharClass out_;
  std::map<std::pair<int, CodeRanges>, int32_t> ids_;
};

}  // namespace

CodeRanges normalize_ranges(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges merged;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  CodeRanges out;
  for (const auto& [lo, hi] : merged) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) out.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) out.emplace_back(kSurrogateHi + 1, hi);
  }
  return out;
}

CodeRanges complement_ranges(const CodeRanges& ranges) {
  const CodeRanges in = normalize_ranges(ranges);
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : in) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return normalize_ranges(std::move(out));
}

CharClass compile_char_class(CodeRanges ranges) {
  return AutomatonBuilder().build(normalize_ranges(std::move(ranges)));
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_utf8(std::string_view text, size_t& pos, uint32_t& cp) {
  // Walks the automaton of all scalar values, which refuses overlongs and surrogates.
  static const CharClass any = compile_char_class({{0, kMaxCodePoint}});  // no surrogates
  int32_t state = 0;
  uint32_t value = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    value = i == pos ? (b < 0x80   ? b
                        : b < 0xE0 ? b & 0x1F
                        : b < 0xF0 ? b & 0x0F
                                   : b & 0x07)
                     : value << 6 | (b & 0x3F);
    state = any.next[static_cast<size_t>(state) * 256 + b];
    if (state == kClassReject) return false;
    if (state == kClassDone) {
      pos = i + 1;
      cp = value;
      return true;
    }
  }
  return false;
}

bool read_hex(std::string_view text, size_t& pos, size_t min_digits, size_t max_digits,
              uint32_t& value) {
  size_t n = 0;
  uint64_t v = 0;
  while (n < max_digits && pos + n < text.size() &&
         std::isxdigit(static_cast<unsigned char>(text[pos + n]))) {
    const char ch = text[pos + n];
    v = v * 16 + static_cast<uint64_t>(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    if (v > kMaxCodePoint) return false;
    ++n;
  }
  if (n < min_digits) return false;
  pos += n;
  value = static_cast<uint32_t>(v);
  return true;
}

}  // namespace kestrel::structured
