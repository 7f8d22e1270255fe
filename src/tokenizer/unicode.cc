// tokenizer/unicode.cc — UTF-8 stepping, White_Space, Unicode normalization (UAX #15) and
// lowercasing.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_norm_data.h"

namespace kestrel {
namespace {

// Hangul syllables decompose and compose arithmetically (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00;
constexpr char32_t kLBase = 0x1100;
constexpr char32_t kVBase = 0x1161;
constexpr char32_t kTBase = 0x11A7;
constexpr char32_t kLCount = 19;
constexpr char32_t kVCount = 21;
constexpr char32_t kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  const auto& t = unicode_data::kCombiningClasses;
  const auto it =
      std::lower_bound(t.begin(), t.end(), cp, [](const auto& e, char32_t c) { return e.cp < c; });
  return it != t.end() && it->cp == cp ? it->ccc : 0;
}

const unicode_data::Mapping* find_mapping(std::span<const unicode_data::Mapping> table,
                                          char32_t cp) {
  const auto it = std::lower_bound(table.begin(), table.end(), cp,
                                   [](const auto& e, char32_t c) { return e.cp < c; });
  return it != table.end() && it->cp == cp ? &*it : nullptr;
}

void decompose(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (compat) {
    if (const auto* d = find_mapping(unicode_data::kCompatibility, cp)) {
      const auto pool = unicode_data::kCompatibilityPool.subspan(d->offset, d->length);
      out.insert(out.end(), pool.begin(), pool.end());
      return;
    }
  }
  if (const auto* d = find_mapping(unicode_data::kCanonical, cp)) {
    const auto pool = unicode_data::kCanonicalPool.subspan(d->offset, d->length);
    out.insert(out.end(), pool.begin(), pool.end());
    return;
  }
  out.push_back(cp);
}

// 0 when the pair does not compose.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto& t = unicode_data::kCompositions;
  const auto it = std::lower_bound(t.begin(), t.end(), std::pair(a, b), [](const auto& e, auto k) {
    return std::pair(e.first, e.second) < k;
  });
  return it != t.end() && it->first == a && it->second == b ? it->composite : 0;
}

// Canonical ordering: stable sort of each run of non-starters by combining class.
void reorder(std::vector<char32_t>& cps) {
  size_t i = 0;
  while (i < cps.size()) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(
        cps.begin() + static_cast<ptrdiff_t>(i), cps.begin() + static_cast<ptrdiff_t>(j),
        [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

void compose(std::vector<char32_t>& cps) {
  if (cps.empty()) return;
  size_t starter = 0;
  bool have_starter = combining_class(cps[0]) == 0;
  std::vector<char32_t> out = {cps[0]};
  int last_class = have_starter ? 0 : 256;
  for (size_t i = 1; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cls = combining_class(c);
    // c may join the starter unless a character between them blocks it.
    if (have_starter && (last_class < cls || (last_class == 0 && out.size() - 1 == starter))) {
      if (const char32_t composite = compose_pair(out[starter], c)) {
        out[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = out.size();
      have_starter = true;
      last_class = 0;
    } else {
      last_class = cls;
    }
    out.push_back(c);
  }
  cps.swap(out);
}

void normalize_run(std::string_view text, NormalForm form, std::string& out) {
  // ASCII is left unchanged by every form, and is most of the text in practice.
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) {
    out.append(text);
    return;
  }
  const bool compat = form == NormalForm::kNfkc || form == NormalForm::kNfkd;
  std::vector<char32_t> cps;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = next_utf8_char(text, i);
    decompose(c.cp, compat, cps);
    i += c.length;
  }
  reorder(cps);
  if (form == NormalForm::kNfc || form == NormalForm::kNfkc) compose(cps);
  for (char32_t cp : cps) append_utf8(out, cp);
}

}  // namespace

Utf8Char next_utf8_char(std::string_view text, size_t pos) {
  const size_t n = valid_utf8_prefix(text.substr(pos, std::min<size_t>(4, text.size() - pos)));
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (n == 0) return {b0, 1, false};
  size_t len = 1;
  char32_t cp = b0;
  if (b0 >= 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else if (b0 >= 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  }
  if (len > n) return {b0, 1, false};
  for (size_t k = 1; k < len; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  return {cp, len, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

std::string normalize(std::string_view text, NormalForm form) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid = valid_utf8_prefix(text.substr(i));
    normalize_run(text.substr(i, valid), form, out);
    i += valid;
    if (i < text.size()) out.push_back(text[i++]);  // an invalid byte, copied through
  }
  return out;
}

std::string to_lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = next_utf8_char(text, i);
    const auto* m = c.valid ? find_mapping(unicode_data::kLowercase, c.cp) : nullptr;
    if (m == nullptr) {
      out.append(text.substr(i, c.length));
    } else {
      for (char32_t cp : unicode_data::kLowercasePool.subspan(m->offset, m->length)) {
        append_utf8(out, cp);
      }
    }
    i += c.length;
  }
  return out;
}

}  // namespace kestrel
